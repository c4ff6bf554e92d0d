"""chat.py: templates render exactly like transformers' apply_chat_template; parsing recovers tool calls."""
import copy
import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
import pytest
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat import ChatFormat  # noqa: E402
from tiny import STYLES, write_tiny_tokenizer  # noqa: E402

FAMILY_NAMES = ["lfm2", "lfm2_moe", "lfm3", "llama", "qwen3"]
FORMAT_FAMILY = {"pythonic": "lfm2", "xml": "lfm3", "json": "qwen3"}

TOOLS = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string"}, "timeout": {"type": "integer"}, "env": {"type": "object"},
            "flags": {"type": "array", "items": {"type": "string"}}, "verbose": {"type": "boolean"},
            "cwd": {"type": ["string", "null"]}}, "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "read", "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
]
ARGS = {"command": 'echo "héllo → wörld" && printf \'a\\nb\'\nls -la', "timeout": 30, "env": {"LANG": "C.UTF-8"},
        "flags": ["-l", "-a"], "verbose": True, "cwd": None}


def call(name, arguments, id="call_1"):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


AGENT_LOOP = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test, s'il vous plaît."},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [call("bash", ARGS)]},
    {"role": "tool", "tool_call_id": "call_1", "content": "FAILED test_total\nassert 3 == 4"},
    {"role": "assistant", "content": None, "tool_calls": [call("read", {"path": "a.py"}, "c2"),
                                                           call("read", {"path": "b.py"}, "c3")]},
    {"role": "tool", "tool_call_id": "c2", "content": "def total(): ..."},
    {"role": "tool", "tool_call_id": "c3", "content": ""},
]
CONVERSATIONS = {
    "plain": ([{"role": "user", "content": "Hello!"}], None),
    "system": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], None),
    "tools": ([{"role": "user", "content": "List files"}], TOOLS),
    "system_tools": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "List files"}], TOOLS),
    "agent_loop": (AGENT_LOOP, TOOLS),
    "multi_turn": ([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
                    {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6"}], None),
    "content_parts": ([{"role": "user", "content": [{"type": "text", "text": "part one, "},
                                                    {"type": "text", "text": "part two"}]}], None),
    "reasoning": ([{"role": "user", "content": "Run it"},
                   {"role": "assistant", "content": "", "reasoning_content": "I should run the tests.",
                    "tool_calls": [call("bash", {"command": "pytest -q"})]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "1 passed"}], TOOLS),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    cache = {}

    def get(model_type):
        if model_type not in cache:
            path = tmp_path_factory.mktemp(model_type)
            write_tiny_tokenizer(path, model_type)
            cache[model_type] = (ChatFormat.from_checkpoint(path), AutoTokenizer.from_pretrained(path))
        return cache[model_type]
    return get


def with_string_arguments(messages):
    messages = copy.deepcopy(messages)
    for m in messages:
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.dumps(c["function"]["arguments"], ensure_ascii=False)
    return messages


def completion_of(fmt, messages, tools=None):
    """The assistant text a model would have generated for the last message of `messages`."""
    prefix = fmt.render_text(messages[:-1], tools, add_generation_prompt=True)
    full = fmt.render_text(messages, tools, add_generation_prompt=False)
    assert full.startswith(prefix)
    return full[len(prefix):]


# ----------------------------------------------------------------------------- rendering vs transformers
@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("model_type", FAMILY_NAMES)
def test_render_text_matches_transformers(pair, model_type, conversation, add_generation_prompt):
    fmt, hf = pair(model_type)
    messages, tools = CONVERSATIONS[conversation]
    expected = hf.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                      tokenize=False)
    assert fmt.render_text(messages, tools, add_generation_prompt=add_generation_prompt) == expected


@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("model_type", FAMILY_NAMES)
def test_render_ids_match_transformers(pair, model_type, conversation):
    fmt, hf = pair(model_type)
    messages, tools = CONVERSATIONS[conversation]
    expected = hf.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                      return_dict=False)
    assert fmt.render(messages, tools) == expected


@pytest.mark.parametrize("model_type", FAMILY_NAMES)
def test_json_string_arguments_render_like_dict_arguments(pair, model_type):
    fmt, hf = pair(model_type)
    expected = hf.apply_chat_template(AGENT_LOOP, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert fmt.render_text(with_string_arguments(AGENT_LOOP), TOOLS) == expected


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_dense_template_itself_accepts_string_arguments(pair, model_type):
    _, hf = pair(model_type)
    as_dicts = hf.apply_chat_template(AGENT_LOOP, tools=TOOLS, tokenize=False)
    assert hf.apply_chat_template(with_string_arguments(AGENT_LOOP), tools=TOOLS, tokenize=False) == as_dicts


@pytest.mark.parametrize("model_type", ["lfm2", "lfm3"])
def test_pythonic_and_xml_templates_refuse_unparsed_string_arguments(pair, model_type):
    _, hf = pair(model_type)
    with pytest.raises(jinja2.TemplateError, match="parse the JSON string first"):
        hf.apply_chat_template(with_string_arguments(AGENT_LOOP), tools=TOOLS, tokenize=False)


def test_invalid_json_arguments_are_a_clear_error(pair):
    fmt, _ = pair("lfm2")
    messages = [{"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [call("bash", "{not json")]}]
    with pytest.raises(ValueError, match="'bash': arguments are not valid JSON"):
        fmt.render_text(messages)


def test_enable_thinking_false_prefills_an_empty_think_block(pair):
    fmt, hf = pair("qwen3")
    messages = [{"role": "user", "content": "Hi"}]
    text = fmt.render_text(messages, enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert text == hf.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=False,
                                          tokenize=False)


@pytest.mark.parametrize("model_type", ["lfm2", "lfm2_moe", "lfm3"])
def test_lfm_templates_emit_bos_exactly_once(pair, model_type):
    fmt, _ = pair(model_type)
    ids = fmt.render(*CONVERSATIONS["agent_loop"])
    bos = fmt.tokenizer.token_to_id("<|startoftext|>")
    assert ids[0] == bos and ids.count(bos) == 1


@pytest.mark.parametrize("model_type", FAMILY_NAMES)
def test_decode_of_rendered_ids_is_the_rendered_text(pair, model_type):
    fmt, _ = pair(model_type)
    assert fmt.decode(fmt.render(*CONVERSATIONS["agent_loop"])) == fmt.render_text(*CONVERSATIONS["agent_loop"])


def test_empty_conversation_is_refused(pair):
    with pytest.raises(ValueError, match="empty conversation"):
        pair("lfm3")[0].render_text([])


def test_template_helpers_match_transformers(tmp_path):
    write_tiny_tokenizer(tmp_path, "qwen3")
    (tmp_path / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% generation %}{{ m | tojson(indent=2) }}{% endgeneration %}\n{% endfor %}"
        "{{ tools | tojson(separators=(',', ':'), sort_keys=true) }}{{ eos_token }}"
        "{% if add_generation_prompt %}{{ strftime_now('%Y') }}{% endif %}")
    messages = [{"role": "user", "content": "é\"<b>"}, {"role": "assistant", "content": "x"}, {"role": "user"}]
    expected = AutoTokenizer.from_pretrained(tmp_path).apply_chat_template(
        messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert ChatFormat.from_checkpoint(tmp_path).render_text(messages, TOOLS) == expected
    assert expected.endswith(f"<|im_end|>{datetime.now().year}")


def test_raise_exception_in_a_template_raises_template_error(tmp_path):
    write_tiny_tokenizer(tmp_path, "lfm3")
    (tmp_path / "chat_template.jinja").write_text("{{ raise_exception('no system role') }}")
    with pytest.raises(jinja2.TemplateError, match="no system role"):
        ChatFormat.from_checkpoint(tmp_path).render_text([{"role": "user", "content": "x"}])


# ----------------------------------------------------------------------------- loading
def test_template_is_read_from_tokenizer_config_when_no_jinja_file(tmp_path):
    write_tiny_tokenizer(tmp_path, "lfm2")
    template = (tmp_path / "chat_template.jinja").read_text()
    (tmp_path / "chat_template.jinja").unlink()
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    messages, tools = CONVERSATIONS["agent_loop"]
    assert ChatFormat.from_checkpoint(tmp_path).render_text(messages, tools) == \
        AutoTokenizer.from_pretrained(tmp_path).apply_chat_template(messages, tools=tools, tokenize=False,
                                                                    add_generation_prompt=True)


def test_named_templates_in_tokenizer_config_use_default(tmp_path):
    write_tiny_tokenizer(tmp_path, "qwen3")
    (tmp_path / "chat_template.jinja").unlink()
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "rag", "template": "RAG"}, {"name": "default", "template": "DEFAULT"}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert ChatFormat.from_checkpoint(tmp_path).render_text([{"role": "user", "content": "x"}]) == "DEFAULT"


@pytest.mark.parametrize("model_type, tool_format",
                         [("lfm2", "pythonic"), ("lfm2_moe", "pythonic"), ("lfm3", "xml"), ("qwen3", "json"),
                          ("llama", "json")])
def test_tool_format_is_detected_from_the_template(tmp_path, model_type, tool_format):
    write_tiny_tokenizer(tmp_path, model_type)
    assert ChatFormat.from_checkpoint(tmp_path).tool_format == tool_format


@pytest.mark.parametrize("model_type, tool_format", [("lfm2", "pythonic"), ("lfm3", "xml"), ("qwen3", "json")])
def test_tool_format_falls_back_to_config_model_type(tmp_path, model_type, tool_format):
    write_tiny_tokenizer(tmp_path, "qwen3")     # a template that renders tools, but with no call markers
    (tmp_path / "chat_template.jinja").write_text("{{ tools | tojson }}{% for m in messages %}{{ m.content }}{% endfor %}")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    assert ChatFormat.from_checkpoint(tmp_path).tool_format == tool_format


def test_eos_token_ids_include_im_end_and_generation_config(tmp_path):
    write_tiny_tokenizer(tmp_path, "qwen3")
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    fmt = ChatFormat.from_checkpoint(tmp_path)
    assert fmt.eos_token_ids == {fmt.tokenizer.token_to_id("<|im_end|>"), fmt.tokenizer.token_to_id("<|endoftext|>")}


def test_missing_tokenizer_json_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        ChatFormat.from_checkpoint(tmp_path)


def test_missing_chat_template_names_the_file(tmp_path):
    write_tiny_tokenizer(tmp_path, "lfm3")
    (tmp_path / "chat_template.jinja").unlink()
    with pytest.raises(FileNotFoundError, match="chat_template.jinja"):
        ChatFormat.from_checkpoint(tmp_path)


def test_invalid_jinja_names_the_file(tmp_path):
    write_tiny_tokenizer(tmp_path, "lfm2")
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }")
    with pytest.raises(ValueError, match="chat_template.jinja: invalid Jinja chat template"):
        ChatFormat.from_checkpoint(tmp_path)


# ----------------------------------------------------------------------------- tiny tokenizers
def test_unknown_model_type_lists_supported_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown model_type 'gpt2'.*lfm2, lfm2_moe, lfm3, llama, qwen3"):
        write_tiny_tokenizer(tmp_path, "gpt2")


@pytest.mark.parametrize("model_type", FAMILY_NAMES)
def test_tiny_tokenizer_ids_match_its_special_tokens(tmp_path, model_type):
    info = write_tiny_tokenizer(tmp_path, model_type)
    fmt, fam = ChatFormat.from_checkpoint(tmp_path), STYLES[model_type]
    assert info["vocab_size"] == fmt.tokenizer.get_vocab_size() <= 1024
    assert fmt.tokenizer.id_to_token(info["eos_token_id"]) == fam["eos"] == fmt.eos_token
    assert fmt.tokenizer.id_to_token(info["pad_token_id"]) == fam["pad"]
    assert fmt.tokenizer.id_to_token(info["bos_token_id"]) == (fam["bos"] or fam["pad"])


def test_tiny_tokenizer_is_deterministic(tmp_path):
    write_tiny_tokenizer(tmp_path / "a", "lfm3")
    write_tiny_tokenizer(tmp_path / "b", "lfm3")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()


# ----------------------------------------------------------------------------- parsing
def assert_calls(calls, expected):
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == expected
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_") and len(c["id"]) > 10


@pytest.mark.parametrize("tool_format", FORMAT_FAMILY)
def test_parse_recovers_rendered_tool_calls(pair, tool_format):
    fmt, _ = pair(FORMAT_FAMILY[tool_format])
    second = {"path": "dir/naïve \"q\".py"}
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "Let me look.",
                 "tool_calls": [call("bash", ARGS), call("read", second, "c2")]}]
    content, calls = fmt.parse(completion_of(fmt, messages, TOOLS), TOOLS)
    assert content == "Let me look."
    assert_calls(calls, [("bash", ARGS), ("read", second)])


@pytest.mark.parametrize("tool_format", FORMAT_FAMILY)
def test_parse_of_plain_text_has_no_calls(pair, tool_format):
    fmt, _ = pair(FORMAT_FAMILY[tool_format])
    assert fmt.parse("All 12 tests pass.<|im_end|>") == ("All 12 tests pass.", [])


@pytest.mark.parametrize("tool_format", FORMAT_FAMILY)
def test_parse_of_only_a_call_has_no_content(pair, tool_format):
    fmt, _ = pair(FORMAT_FAMILY[tool_format])
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "tool_calls": [call("read", {"path": "a.py"})]}]
    content, calls = fmt.parse(completion_of(fmt, messages))
    assert content is None
    assert_calls(calls, [("read", {"path": "a.py"})])


@pytest.mark.parametrize("tool_format", ["xml", "json"])
def test_parse_skips_reasoning_and_calls_inside_it(pair, tool_format):
    fmt, _ = pair(FORMAT_FAMILY[tool_format])
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "reasoning_content": "Maybe <tool_call>x</tool_call>?",
                 "tool_calls": [call("read", {"path": "a.py"})]}]
    text = completion_of(fmt, messages)
    assert fmt.parse_reasoning(text)[0] == "Maybe <tool_call>x</tool_call>?"
    content, calls = fmt.parse(text)
    assert content is None
    assert_calls(calls, [("read", {"path": "a.py"})])


def test_xml_parameters_stay_strings_without_a_schema(pair):
    fmt, _ = pair("lfm3")
    text = "<tool_call>\n<function=bash>\n<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>"
    assert_calls(fmt.parse(text)[1], [("bash", {"timeout": "30"})])
    assert_calls(fmt.parse(text, TOOLS)[1], [("bash", {"timeout": 30})])


def test_xml_strips_exactly_one_newline_around_values(pair):
    fmt, _ = pair("lfm3")
    text = "<tool_call>\n<function=read>\n<parameter=path>\n\n a.py \n\n</parameter>\n</function>\n</tool_call>"
    assert_calls(fmt.parse(text)[1], [("read", {"path": "\n a.py \n"})])


def test_pythonic_accepts_python_and_json_literals(pair):
    fmt, _ = pair("lfm2")
    text = "<|tool_call_start|>[f(a='it\\'s', b=true, c=None, d=-1.5, e=(1, 2), g={'k': [False, null]})]" \
           "<|tool_call_end|>"
    assert_calls(fmt.parse(text)[1], [("f", {"a": "it's", "b": True, "c": None, "d": -1.5, "e": [1, 2],
                                             "g": {"k": [False, None]}})])


def test_separate_call_blocks_are_all_parsed(pair):
    fmt, _ = pair("qwen3")
    text = 'First.\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n' \
           '<tool_call>\n{"name": "b", "arguments": "{\\"x\\": 1}"}\n</tool_call><|im_end|>'
    content, calls = fmt.parse(text)
    assert content == "First."
    assert_calls(calls, [("a", {}), ("b", {"x": 1})])


MALFORMED = {
    "pythonic": ["<|tool_call_start|>[read(path=\"a.py\")]",  # unclosed
                 "<|tool_call_start|>[read(path=]<|tool_call_end|>",  # bad python
                 "<|tool_call_start|>[read(\"a.py\")]<|tool_call_end|>",  # positional
                 "<|tool_call_start|>[read(path=os.system(\"rm -rf /\"))]<|tool_call_end|>",  # not a literal
                 "<|tool_call_start|>[read(**kw)]<|tool_call_end|>",
                 "<|tool_call_start|>[]<|tool_call_end|>",
                 "<|tool_call_start|>[read(path={1, 2})]<|tool_call_end|>"],  # not JSON-serialisable
    "xml": ["<tool_call>\n<function=read>\n<parameter=path>\na.py\n</parameter>\n</function>",  # unclosed
            "<tool_call>\nread a.py\n</tool_call>",
            "<tool_call>\n<function=read>\njunk<parameter=path>\na\n</parameter>\n</function>\n</tool_call>"],
    "json": ['<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}\n',  # unclosed
             '<tool_call>\n{"name": "read", "arguments": {\n</tool_call>',  # bad JSON
             '<tool_call>\n{"arguments": {"path": "a.py"}}\n</tool_call>',  # no name
             '<tool_call>\n{"name": "read", "arguments": ["a.py"]}\n</tool_call>',
             '<tool_call>\n[1, 2]\n</tool_call>'],
}


@pytest.mark.parametrize("tool_format, text", [(f, t) for f, texts in MALFORMED.items() for t in texts])
def test_malformed_calls_stay_in_the_content(pair, tool_format, text):
    fmt, _ = pair(FORMAT_FAMILY[tool_format])
    assert fmt.parse("Trying. " + text + "<|im_end|>") == (("Trying. " + text).strip(), [])


def test_a_bad_block_does_not_spoil_a_good_one(pair):
    fmt, _ = pair("lfm2")
    bad, good = "<|tool_call_start|>[read(1)]<|tool_call_end|>", "<|tool_call_start|>[read(path='a')]<|tool_call_end|>"
    content, calls = fmt.parse(bad + good)
    assert content == bad
    assert_calls(calls, [("read", {"path": "a"})])


@pytest.mark.parametrize("text, expected", [
    ("<think>\nplan it\n</think>\n\nanswer", ("plan it", "answer")),
    ("plan it</think>\n\nanswer", ("plan it", "answer")),  # the template opened <think> itself
    ("<think>still thinking", ("still thinking", "")),
    ("just an answer", (None, "just an answer")),
])
def test_parse_reasoning_splits_think_blocks(pair, text, expected):
    assert pair("lfm3")[0].parse_reasoning(text) == expected


# --- a template that ignores tools (SmolLM2's plain ChatML): tools_as_text
CHATML_NO_TOOLS = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                   "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
                   "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
                   "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture
def chatml(tmp_path):
    write_tiny_tokenizer(tmp_path, "qwen3")
    (tmp_path / "chat_template.jinja").write_text(CHATML_NO_TOOLS)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "lfm2"}))   # the family's format is not used
    return ChatFormat.from_checkpoint(tmp_path)


def test_template_without_tools_gets_them_in_the_system_message(chatml):
    assert not chatml.template_tools and chatml.tool_format == "json"
    text = chatml.render_text([{"role": "user", "content": "List files"}], TOOLS)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n# Tools") and "You are a helpful assistant." not in text
    listed = system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in listed] == TOOLS
    # the example is a call of the first tool that the parser reads back
    example = system.split("For example:\n")[1].split("\nThe result")[0]
    assert_calls(chatml.parse(example, TOOLS)[1], [("bash", {"command": "..."})])
    # a system message of the conversation comes first, the tools after it
    text = chatml.render_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}], TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")


def test_template_without_tools_renders_an_agent_loop_the_parser_reads_back(chatml):
    text = chatml.render_text(AGENT_LOOP, TOOLS, add_generation_prompt=False)
    turns = text.split("<|im_start|>")[1:]
    assert [t.split("\n")[0] for t in turns] == ["system", "user", "assistant", "user", "assistant", "user"]
    # every past call parses back to what was called, results are in order in one user turn
    content, calls = chatml.parse(turns[2].removeprefix("assistant\n").removesuffix("<|im_end|>\n"), TOOLS)
    assert content == "Let me look." and [c["function"]["name"] for c in calls] == ["bash"]
    assert json.loads(calls[0]["function"]["arguments"]) == ARGS
    content, calls = chatml.parse(turns[4].removeprefix("assistant\n").removesuffix("<|im_end|>\n"), TOOLS)
    assert content is None and [json.loads(c["function"]["arguments"]) for c in calls] == [{"path": "a.py"},
                                                                                             {"path": "b.py"}]
    assert turns[5] == ("user\n<tool_response>\ndef total(): ...\n</tool_response>\n"
                        "<tool_response>\n\n</tool_response><|im_end|>\n")
    # without tools and without tool turns the template renders as it always did
    plain = [{"role": "user", "content": "Hello!"}]
    assert chatml.render_text(plain) == chatml._compiled.render(messages=plain, add_generation_prompt=True)

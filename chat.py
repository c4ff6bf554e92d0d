"""Chat formats: render a conversation + tools with the checkpoint's own chat template, and parse the
model's text back into content / tool calls.

Rendering is transformers' `apply_chat_template` (sandboxed Jinja, trim/lstrip blocks, its `tojson`,
`raise_exception`, `strftime_now`, `{% generation %}`); as in vLLM, JSON-string tool-call arguments become dicts
first. Three tool-call formats: LFM2's pythonic `<|tool_call_start|>[f(a="x")]<|tool_call_end|>`, LFM3's XML
`<tool_call>\\n<function=f>\\n<parameter=a>\\nx\\n</parameter>\\n</function>\\n</tool_call>` and Qwen3/Hermes JSON
`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`; a malformed call stays in the content as text.
A template that ignores tools (SmolLM2's plain ChatML) gets them as text (`tools_as_text`).

Left out: streaming parsing, control-token sanitising of user text (transformers' `sanitize_control_tokens`, off
by default there too), multimodal content (only text parts render), `continue_final_message`, JSON-schema-guided
decoding.
"""
import ast
import copy
import json
import re
import uuid
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from families import FAMILIES

# ----------------------------------------------------------------------------- rendering
class _Generation(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}` (marks assistant text); renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_template(source: str, name: str = "chat template") -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ValueError(f"{name}: invalid Jinja chat template (line {e.lineno}): {e.message}") from None


def _prepare(messages: list[dict]) -> list[dict]:
    """What transformers and vLLM do before rendering: drop None values, alias the reasoning field,
    and turn JSON-string tool-call arguments into dicts (vLLM's `_postprocess_messages`)."""
    out = []
    for message in copy.deepcopy(list(messages)):
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in ("reasoning_content", "thinking", "reasoning") if k in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        if message.get("role") == "assistant" and "tool_calls" in message:
            if not message["tool_calls"]:
                del message["tool_calls"]
            for call in message.get("tool_calls", []):
                f = call.get("function", call)
                args = f.get("arguments")
                if not args:
                    f["arguments"] = {}
                elif isinstance(args, str):
                    try:
                        f["arguments"] = json.loads(args)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"tool call {f.get('name')!r}: arguments are not valid JSON: {e}") from None
        out.append(message)
    return out


# ----------------------------------------------------------------------------- parsing
_LITERAL_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def _literal(node):
    """A Python literal, also accepting JSON's true/false/null; anything else raises ValueError."""
    if isinstance(node, ast.Name):
        if node.id in _LITERAL_NAMES:
            return _LITERAL_NAMES[node.id]
        raise ValueError(f"not a literal: {node.id}")
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("** in a dict literal")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    return ast.literal_eval(node)


def _parse_pythonic(body: str, schemas: dict) -> list:
    tree = ast.parse(body.strip(), mode="eval").body
    calls = tree.elts if isinstance(tree, ast.List) else [tree]
    if not calls:
        raise ValueError("empty call list")
    out = []
    for call in calls:
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
            raise ValueError("expected name(key=value, ...)")
        if any(kw.arg is None for kw in call.keywords):
            raise ValueError("** in a call")
        out.append((call.func.id, {kw.arg: _literal(kw.value) for kw in call.keywords}))
    return out


_XML_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*)</function>\s*", re.S)
_XML_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)


def _xml_value(value: str, schema: dict):
    value = value.removeprefix("\n").removesuffix("\n")
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if value == "null" and "null" in kinds:
        return None
    if kind is None or "string" in kinds:
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _parse_xml(body: str, schemas: dict) -> list:
    m = _XML_FUNCTION.fullmatch(body)
    if not m or _XML_PARAMETER.sub("", m.group(2)).strip():
        raise ValueError("expected <function=...> with <parameter=...> blocks")
    name, props = m.group(1).strip(), schemas.get(m.group(1).strip(), {})
    return [(name, {p.group(1).strip(): _xml_value(p.group(2), props.get(p.group(1).strip(), {}))
                    for p in _XML_PARAMETER.finditer(m.group(2))})]


def _parse_json(body: str, schemas: dict) -> list:
    obj = json.loads(body)
    args = obj.get("arguments", obj.get("parameters", {}))
    args = json.loads(args) if isinstance(args, str) else args
    if not isinstance(obj.get("name"), str) or not isinstance(args, dict):
        raise ValueError("expected {'name': str, 'arguments': object}")
    return [(obj["name"], args)]


# format -> (block start, block end, body parser)
TOOL_FORMATS = {
    "pythonic": ("<|tool_call_start|>", "<|tool_call_end|>", _parse_pythonic),
    "xml": ("<tool_call>", "</tool_call>", _parse_xml),
    "json": ("<tool_call>", "</tool_call>", _parse_json),
}


def detect_tool_format(template: str, model_type: str | None = None) -> str:
    """The template's own markers decide; else the model family; else Hermes/Qwen JSON. A template that
    ignores tools gets them as text (`tools_as_text`), in the JSON format."""
    if not template_handles_tools(template):
        return "json"
    if "<|tool_call_start|>" in template or "<|tool_list_start|>" in template:
        return "pythonic"
    if "<function=" in template:
        return "xml"
    if "<tool_call>" in template:
        return "json"
    family = FAMILIES.get((model_type or "").removesuffix("_vl"))     # a vision model speaks its family's format
    return family.tool_format if family else "json"


def _tool_schemas(tools) -> dict:
    """{function name: {parameter name: JSON schema}} from OpenAI-style tool definitions."""
    out = {}
    for tool in tools or []:
        f = tool.get("function", tool) if isinstance(tool, dict) else {}
        params = f.get("parameters") or {}
        if isinstance(f.get("name"), str) and isinstance(params.get("properties"), dict):
            out[f["name"]] = params["properties"]
    return out


# ----------------------------------------------------------------------------- tools, for templates without them
TOOLS_PROMPT = """# Tools

You can call functions. Their JSON schemas are within <tools></tools>:
<tools>
{tools}
</tools>

To call a function, answer with a JSON object within <tool_call></tool_call> tags, one block per call:
<tool_call>
{{"name": <function name>, "arguments": <arguments as a JSON object>}}
</tool_call>
For example:
<tool_call>
{example}
</tool_call>
The result comes back within <tool_response></tool_response> tags. Answer without a tool call when you are done."""


def template_handles_tools(template: str) -> bool:
    """Does the template render `tools` or `tool_calls` itself? (A plain ChatML template does neither.)"""
    return bool(re.search(r"\btools\b|\btool_calls\b", template))


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content or ""


def _example_call(tools) -> str:
    """One call of the first tool, with a placeholder for each required argument."""
    f = (tools[0].get("function", tools[0]) if tools and isinstance(tools[0], dict) else {}) or {}
    params = f.get("parameters") or {}
    required = params.get("required") or list(params.get("properties") or {})[:1]
    return json.dumps({"name": f.get("name", "tool"), "arguments": {k: "..." for k in required}}, ensure_ascii=False)


def tools_as_text(messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """The conversation for a template that ignores tools, in the format `parse(..., "json")` reads back: tools in
    the system message, calls as `<tool_call>` JSON in the assistant's text, consecutive results as one user turn of
    `<tool_response>` blocks (as Qwen's template does). `messages` must be `_prepare`d (arguments as dicts)."""
    out, after_tool = [], False
    for m in messages:
        role, content = m.get("role"), _text(m.get("content"))
        if role == "assistant" and m.get("tool_calls"):
            blocks = [json.dumps({"name": c.get("function", c).get("name"),
                                  "arguments": c.get("function", c).get("arguments", {})}, ensure_ascii=False)
                      for c in m["tool_calls"]]
            content = "\n".join([content] * bool(content) + [f"<tool_call>\n{b}\n</tool_call>" for b in blocks])
            out.append({"role": "assistant", "content": content})
        elif role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if after_tool:
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
        else:
            out.append({**m, "content": content})
        after_tool = role == "tool"
    if tools:
        listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        prompt = TOOLS_PROMPT.format(tools=listed, example=_example_call(tools))
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


# ----------------------------------------------------------------------------- ChatFormat
class ChatFormat:
    """A checkpoint's tokenizer + chat template + tool-call format."""

    def __init__(self, tokenizer: Tokenizer, template: str, special_tokens: dict, tool_format: str,
                 eos_token_ids=(), template_name: str = "chat template"):
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"unknown tool format {tool_format!r}; known: {', '.join(TOOL_FORMATS)}")
        self.tokenizer, self.template, self.tool_format = tokenizer, template, tool_format
        self.special_tokens = {k: v for k, v in special_tokens.items() if v is not None}
        self.bos_token, self.eos_token = self.special_tokens.get("bos_token"), self.special_tokens.get("eos_token")
        self._compiled = compile_template(template, template_name)
        self.template_tools = template_handles_tools(template)   # else tools_as_text rewrites the conversation
        stops = {self.eos_token, "<|im_end|>"}
        self.eos_token_ids = {tokenizer.token_to_id(t) for t in stops if t} - {None} | set(eos_token_ids)
        self.stop_strings = sorted({tokenizer.id_to_token(i) for i in self.eos_token_ids} - {None}, key=len)[::-1]

    @classmethod
    def from_checkpoint(cls, path) -> "ChatFormat":
        path = Path(path)
        tokenizer_file = path / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise FileNotFoundError(f"{tokenizer_file}: tokenizer.json not found in the checkpoint")
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        config_file, template_file = path / "tokenizer_config.json", path / "chat_template.jinja"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        if template_file.is_file():
            template, name = template_file.read_text(), str(template_file)
        else:
            template, name = config.get("chat_template"), str(config_file)
            if isinstance(template, list):  # [{"name": ..., "template": ...}]
                template = {t["name"]: t["template"] for t in template}.get("default")
            if not isinstance(template, str):
                raise FileNotFoundError(f"{template_file}: no chat template (nor a 'chat_template' in {config_file})")
        names = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
        special = {k: v.get("content") if isinstance(v, dict) else v for k, v in config.items() if k in names}
        model_config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
        eos_ids = []
        for file in (path / "generation_config.json", path / "config.json"):
            value = json.loads(file.read_text()).get("eos_token_id") if file.is_file() else None
            eos_ids += value if isinstance(value, list) else [value] if isinstance(value, int) else []
        return cls(tokenizer, template, special, detect_tool_format(template, model_config.get("model_type")),
                   eos_ids, name)

    # --- rendering
    def render_text(self, messages: list[dict], tools: list[dict] | None = None,
                    add_generation_prompt: bool = True, **template_kwargs) -> str:
        if not messages:
            raise ValueError("cannot render an empty conversation")
        messages = _prepare(messages)
        if not self.template_tools:
            messages, tools = tools_as_text(messages, tools), None
        return self._compiled.render(messages=messages, tools=tools, documents=None,
                                     add_generation_prompt=add_generation_prompt,
                                     **{**self.special_tokens, **template_kwargs})

    def render(self, messages: list[dict], tools: list[dict] | None = None,
               add_generation_prompt: bool = True, **template_kwargs) -> list[int]:
        return self.encode(self.render_text(messages, tools, add_generation_prompt, **template_kwargs))

    def completion(self, messages: list[dict], reply: dict, tools: list[dict] | None = None) -> list[int]:
        """The tokens a model writes for `reply` (an assistant message, tool calls included) after `messages`, up to
        and including its end-of-turn token: `render(messages) + completion(...)` is what the server records for
        that turn. Raises ValueError when the template does not render the conversation as a prefix."""
        prompt = self.render_text(messages, tools, add_generation_prompt=True)
        text = self.render_text(list(messages) + [reply], tools, add_generation_prompt=False)
        if not text.startswith(prompt):
            raise ValueError("the chat template does not render the conversation before an assistant turn as a "
                             "prefix of the conversation with it")
        rest = text[len(prompt):]
        ends = [(rest.find(s), s) for s in self.stop_strings if s in rest]
        if not ends:
            raise ValueError(f"the chat template ends an assistant turn with no end-of-turn token "
                             f"({self.stop_strings})")
        at, stop = min(ends)
        return self.encode(rest[:at + len(stop)])

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # --- parsing
    def parse_reasoning(self, text: str) -> tuple[str | None, str]:
        """(reasoning, rest): the text before `</think>` (an opening `<think>` is optional) is reasoning;
        an unclosed `<think>` makes everything after it reasoning."""
        if "</think>" in text:
            reasoning, _, rest = text.partition("</think>")
            head, tag, tail = reasoning.partition("<think>")
            return (tail if tag else head).strip(), ((head if tag else "") + rest).lstrip("\n")
        head, tag, tail = text.partition("<think>")
        return (tail.strip(), head) if tag else (None, text)

    def parse(self, text: str, tools: list[dict] | None = None) -> tuple[str | None, list[dict]]:
        """(content, tool_calls) from generated text; reasoning is dropped (see `parse_reasoning`).
        Pass `tools` so XML parameters are typed by their JSON schema. Never raises on bad output."""
        text = self._strip_stop(text)
        _, text = self.parse_reasoning(text)
        start, end, parse_body = TOOL_FORMATS[self.tool_format]
        schemas, calls = _tool_schemas(tools), []

        def take(match):
            try:
                parsed = [(name, json.dumps(args, ensure_ascii=False)) for name, args in
                          parse_body(match.group(1), schemas)]
            except Exception:  # malformed: leave the block in the content as text
                return match.group(0)
            calls.extend({"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                          "function": {"name": name, "arguments": args}} for name, args in parsed)
            return ""

        content = re.sub(re.escape(start) + r"(.*?)" + re.escape(end), take, text, flags=re.S).strip()
        return content or None, calls

    def _strip_stop(self, text: str) -> str:
        while True:
            stripped = text.rstrip()
            stop = next((s for s in self.stop_strings if stripped.endswith(s)), None)
            if stop is None:
                return text
            text = stripped[: -len(stop)]

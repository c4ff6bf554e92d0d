"""The reader of code that runs now (python -c, execute_code, node -e, heredocs into interpreters), by regexes, into
the Facts of the shell reader that met it (shellread.py): string literals (paths where they look like one), file
writes (through a variable: an unknown target), subprocess calls (read as shell), sockets, dataset hubs and reads
of credentials (environment dumps, secret-named variables, model-API SDKs).

Left out: parsing (control flow; a path held in a variable is not followed), strings built at run time (chr(),
joined names; a literal reversed with [::-1] is read reversed), what an imported module does.
"""
import re
import warnings

# a test file's name (also what the rules call a test: guardrules._is_test)
TESTFILE = re.compile(r"(?:test_.+\.\w+|.+_tests?\.\w+|tests?\.py|conftest\.py|.+\.(?:test|spec)\.[cm]?[jt]sx?"
                      r"|.+_spec\.rb|.+Tests?\.(?:java|kt|cs|swift|php)|test\.sh)$")
_CODE_CRED = re.compile(r"(?:print|pprint|dumps?|str|repr|list|sorted|write)\s*\(\s*(?:dict\s*\(\s*)?(?:os\.)?"
                        r"environ\s*\)|environ\s*\.\s*(?:items|keys|values)\s*\(|process\.env\s*\)|"
                        r"(?:environ(?:\.get)?\s*[\[(]|getenv\s*\(|process\.env\.?\[?)\s*['\"]?(?:[A-Z0-9_]*_)?"
                        r"(?:TOKEN|API_?KEY|SECRET|PASSWORD|CREDENTIALS?|ACCESS_KEY)\b|^\s*(?:import|from)\s+"
                        r"(?:openai|litellm|anthropic|google\.generativeai|groq|mistralai|cohere)\b|"
                        r"require\(\s*['\"](?:openai|@anthropic-ai/sdk)|"
                        # libraries that read a credential store without naming a file
                        r"\bnetrc\.netrc\s*\(|\bkeyring\.get_(?:password|credential)\s*\(|\.get_credentials\s*\(|"
                        r"\b(?:huggingface_hub\.|HfFolder\.)get_token\s*\(", re.M)
# the environment as a whole, copied into a name (env = os.environ.copy(), dict(os.environ), {**os.environ}): a dump
# when that name then reaches output or is walked (print(env), json.dumps(env), env.items(), for k in env)
_ENV_ALIAS = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*(?:dict\s*\(\s*|\{\s*\*\*\s*|copy\.(?:deep)?copy\s*\(\s*)?(?:os\.)?"
                        r"environ\b(?!\s*\[|\s*\.\s*(?:get|setdefault|pop)\b)")
_ENV_SINK = r"(?:print|pprint|dumps?|str|repr|list|sorted|write|format)\s*\(\s*(?:dict\s*\(\s*)?{0}\b" \
            r"(?:\.copy\(\))?\s*[,)]" \
            r"|\b{0}\s*\.\s*(?:items|keys|values)\s*\(|\bfor\s+\w+(?:\s*,\s*\w+)?\s+in\s+{0}\b|\{{\s*{0}\s*[!:}}]"
# a literal reversed: read as it runs
_REVERSED = re.compile(r"""(['"])([^'"\\\n]{1,4096})\1\s*\[\s*:\s*:\s*-1\s*\]""")
_PYSTR = re.compile(r"""[rRbBuUfF]{0,2}(?:'''(.*?)'''|\"\"\"(.*?)\"\"\"|'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)")""",
                    re.S)
_CONCAT = re.compile(r"""(?<!['"\\])(['"])(?:\s*\+\s*|[ \t]+)\1(?!\1)""")       # 'a' + 'b' -> 'ab'
_LIT = r"""[rRbBuUfF]{0,2}(?:'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)")"""   # two groups: '..' or ".."
_PY_WRITE = re.compile(r"open\(\s*" + _LIT + r"\s*,\s*(?:mode\s*=\s*)?['\"]([^'\"]*[wax+][^'\"]*)['\"]"
                       r"|Path\(\s*" + _LIT + r"\s*\)\s*\.\s*(write_text|write_bytes|unlink|touch|rename|replace|rmdir)"
                       r"|(?:os\.(remove|unlink|rmdir|removedirs|truncate|chmod|rename|replace)|shutil\.(rmtree|move|"
                       r"copy\w*)|(writeFile|appendFile|unlink|rm|rmdir|rename|copyFile|write_file)(?:Sync)?)\(\s*"
                       + _LIT + r"(?:\s*,\s*" + _LIT + r")?")
_PY_VARWRITE = re.compile(r"open\(\s*(?![rRbBuUfF]{0,2}['\"])[^;\n]{1,300}?,\s*(?:mode\s*=\s*)?['\"][rbt]*[wax+]"
                          r"[rwxab+t]*['\"]\s*[,)]|\.(?:write_text|"
                          r"write_bytes|unlink|rmdir)\(|(?:os\.(?:remove|unlink|truncate|rename|replace)|shutil\.(?:"
                          r"rmtree|move))\(\s*[A-Za-z_]")
_PY_SHELL = re.compile(r"(?:os\.system|os\.popen|subprocess\.\w+|check_output|check_call|Popen|execSync|spawnSync|"
                       r"exec|terminal)\(\s*(\[[^\]]{0,4000}\]|" + _LIT + ")")
_PY_SOCKET = re.compile(r"\(\s*['\"]([\w.-]+\.[a-z]{2,}|\d+\.\d+\.\d+\.\d+)['\"]\s*,\s*(\d+)\s*\)")
# A network call whose target is not a literal: a name (resolved through `name = "literal"` in the same code), else
# unknown - the hosts rule fails closed on it ("?")
_PY_NET = re.compile(r"(?:\b(?:requests|httpx|urllib3|aiohttp)\.(?:get|post|put|patch|delete|head|request|stream)|"
                     r"\burlopen|\burllib\.request\.Request|\bHTTPS?Connection|(?<![.\w])fetch|\baxios\.\w+)"
                     r"\s*\(\s*([A-Za-z_][\w.]*)\s*[,)]|"
                     r"(?:create_connection|\.connect)\s*\(\s*\(\s*([A-Za-z_][\w.]*)\s*,")
# HOME walked, listed, globbed, copied or archived whole: a recursive read of "~"
_PY_HOMEWALK = re.compile(r"(?:walk|scandir|listdir|i?glob|copytree|make_archive)\(\s*(?:os\.path\.expanduser\(\s*"
                          r"['\"]~/?['\"]\s*\)|(?:pathlib\.)?Path\.home\(\)|os\.environ\[\s*['\"]HOME['\"]\s*\]|"
                          r"os\.(?:environ\.get|getenv)\(\s*['\"]HOME['\"]\s*\))|"
                          r"Path\.home\(\)\s*\.\s*(?:r?glob|iterdir)\(")
# a network call (or a DNS lookup: a leak by name) whose argument is neither a literal nor a name: its target is
# built as it runs - unknown ("?")
_PY_NET_EXPR = re.compile(r"(?:\b(?:requests|httpx|urllib3)\.(?:get|post|put|request)|\burlopen|\bgetaddrinfo|"
                          r"\bgethostbyname(?:_ex)?|\bcreate_connection|(?<![.\w])fetch)\s*\(\s*(?!" + _LIT +
                          r"\s*[,)])(?![A-Za-z_][\w.]*\s*[,)])(?!\(\s*[A-Za-z_][\w.]*\s*,)(?!\(\s*['\"])")
_PY_ASSIGN = re.compile(r"(?:^|;)\s*([A-Za-z_]\w*)\s*=\s*" + _LIT, re.M)
_PY_DATA = re.compile(r"(load_dataset|hf_hub_download|snapshot_download|kagglehub\.\w+)\(\s*(?:repo_id\s*=\s*)?"
                      + _LIT + r"([^)]*)")


def joined(src):
    """Code with its literals as they run: 'a' + 'b' -> 'ab', 'cba'[::-1] -> 'abc'."""
    return _REVERSED.sub(lambda m: m.group(1) + m.group(2)[::-1] + m.group(1), _CONCAT.sub("", src))


def read_code(sh, src):
    """Reads `src` into sh.f: literals, writes, subprocesses, sockets, dataset fetches, credential reads."""
    f = sh.f
    src = joined(src)
    f.code.append(src)
    for m in _PYSTR.finditer(src):
        lit = unescape(next(g for g in m.groups() if g is not None))
        if len(lit) < 4096:
            sh.word(lit)
            if "\n" not in lit and ("/" in lit or lit.startswith(("~", ".")) or TESTFILE.search(lit)):
                f.reads.append((lit, sh.cwd))
            elif lit == "solve.sh":                     # hunting for the oracle by name
                f.reads.append(("/" + lit, "/"))
    for m in _PY_WRITE.finditer(src):
        if m.group(3):                                  # open(path, 'w')
            sh.write([_lit(m, 1)], "edit" if "a" in m.group(3) or "+" in m.group(3) else "new")
        elif m.group(6):                                # Path(path).write_text() / unlink()
            sh.write([_lit(m, 4)], "new" if m.group(6) in ("write_text", "write_bytes", "touch") else "del")
        else:                                           # os.remove, shutil.move, fs.writeFileSync, write_file ...
            verb, a, b = m.group(7) or m.group(8) or m.group(9), _lit(m, 10), _lit(m, 12)
            if verb in ("rename", "replace", "move"):
                sh.write([a], "del")
                sh.write([b], "new")
            elif verb.startswith("copy"):
                sh.write([b], "new")
            else:
                sh.write([a], "edit" if verb in ("truncate", "chmod", "appendFile") else
                         "new" if verb in ("writeFile", "write_file") else "del")
    if _PY_VARWRITE.search(src):                        # writes through a variable: a named test may be it
        f.hits.add("unknown-write")
    f.targets.extend(f"{h}:{p}" for h, p in _PY_SOCKET.findall(src))
    if _PY_HOMEWALK.search(src):
        f.trees.append(("~", "."))
    named = {m.group(1): _lit(m, 2) for m in _PY_ASSIGN.finditer(src)} if "=" in src else {}
    for m in _PY_NET.finditer(src):                     # requests.get(url), socket.create_connection((host, 80))
        v = named.get(m.group(1) or m.group(2))
        f.targets.append(v if v and not v.startswith(("{", "%")) else "?")
    if _PY_NET_EXPR.search(src):                        # urlopen('http://' + '.'.join(..)): built as it runs
        f.targets.append("?")
    for m in _PY_SHELL.finditer(src):
        sh.child().run(" ".join(unescape(s or d) for s, d in re.findall(_LIT, m.group(1))))
    for m in _PY_DATA.finditer(src):
        fn, ref, rest = m.group(1), _lit(m, 2), m.group(4)
        if fn.startswith("kagglehub"):
            f.targets.append(f"https://www.kaggle.com/datasets/{ref}")
        elif "/" in ref:
            ds = fn == "load_dataset" or "dataset" in rest
            f.targets.append(f"https://huggingface.co/{'datasets/' if ds else ''}{ref}")
    if _CODE_CRED.search(src) or _env_dump(src):
        f.hits.add("credentials")


def _env_dump(src):
    """Whether code prints, serializes or walks the whole environment: directly (print(os.environ.copy())) or through
    a name that holds a copy of it (e = os.environ.copy(); print(e)). A copy passed on as env= is no dump."""
    if "environ" not in src:
        return False
    names = ["(?:os\\.)?environ"] + [re.escape(m.group(1)) for m in _ENV_ALIAS.finditer(src)][:20]
    return any(re.search(_ENV_SINK.format(n), src) for n in names)


def _lit(m, i):
    """The text of a literal matched by _LIT at groups i ('..') / i + 1 ("..")."""
    return unescape((m.group(i) if m.group(i) is not None else m.group(i + 1)) or "")


def unescape(s):
    """Backslash escapes as Python, $'..' and printf / echo -e read them."""
    if "\\" not in s:
        return s
    try:
        with warnings.catch_warnings():     # "\*" and friends: invalid escapes stay as they are, silently
            warnings.simplefilter("ignore", DeprecationWarning)
            return s.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return s

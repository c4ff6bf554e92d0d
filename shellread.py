"""The guard's reader: what one tool call would do, as Facts, before any rule looks at it.

    f = analyze("bash", {"command": "cd src && echo x > tests/a.py"})    # f.writes == [("tests/a.py", "src", "new")]

Arguments are routed by key and shape across pi, opencode and hermes (command/cmd -> shell, code -> code, path keys ->
paths, url -> URLs, content/newText/new_string/patch -> written text). Shell is tokenized (quotes, escapes, pipes,
subshells, comments, heredocs, here-strings) into simple commands, each read by cmdread.py (what the program does
with its words: sh -c, eval, xargs, find -exec, ...); a $(..) or backtick part of a word becomes its output when
known (echo, printf), else `**`: solu$(true)tion reads as a glob for "solution". Every word is kept for the rules,
its URLs are targets, and a base64 or hex payload in it is decoded and read as shell and as code. Left out: what a
program does (cmdread.py, gitread.py), code run now (coderead.py), judging (guardrules.py), strings built at run
time (chr(), reversed, downloaded, tr, rev), `cd` across hermes terminal calls, shell functions and glob expansion
(a glob stays a pattern).
"""
import base64
import posixpath
import re
from dataclasses import dataclass, field

from cmdread import read_command
from coderead import read_code, unescape

MAX_TEXT = 200_000        # characters of one message or argument that are indexed or scanned
MAX_DEPTH = 6             # nesting of sh -c / $(..) / eval / decoded payloads that is followed

# ----------------------------------------------------------------------------- vocabulary

SHELL_KEYS = {"command", "cmd", "commands", "script", "shell", "bash"}
CODE_KEYS = {"code", "python", "source_code", "program"}
PATH_KEYS = {"path", "filepath", "file_path", "filename", "file", "files", "paths", "target_file", "notebook_path",
             "destination", "dest", "src", "dst", "old_path", "new_path", "directory", "dir"}
CWD_KEYS = {"workdir", "cwd", "working_directory"}
URL_KEYS = {"url", "urls", "uri", "href", "link", "endpoint"}
CONTENT_KEYS = {"content", "contents", "newtext", "new_text", "new_string", "newstring", "new_str", "replacement",
                "file_text", "insert_text", "patch", "diff", "text"}
QUERY_KEYS = {"query", "q", "queries", "search_query"}
WRITER = re.compile(r"write|edit|patch|create|delete|remove|move|rename|replace|append|insert")

_TOK = re.compile(r"""(?P<sp>[ \t\r]+|\\\n)|(?P<nl>\n)|(?P<op>\|\||&&|;;|\|&|[|&;()])
  |(?P<hd><<-?)[ \t]*(?P<hq>['"]?)(?P<hw>[\w.@%+-]+)(?P=hq)|(?P<hs><<<)|(?P<rd>\d*(?:&>>|>>|&>|>&|>\||<>|<&|[<>]))
  |'(?P<sq>[^']*)'|\$'(?P<an>(?:[^'\\]|\\.)*)'|"(?P<dq>(?:[^"\\]|\\.)*)"|(?P<sub>\$\(|`)
  |(?P<lit>(?:[^\s'"\\|&;<>()`$]|\\.|\$(?![('])|\\$)+)""", re.X | re.S)
_ESC = re.compile(r"\\(.)", re.S)
URL = re.compile(r"\b([a-z][a-z0-9+.-]{1,9})://([^\s'\"<>`|;)]*)", re.I)
_SCP = re.compile(r"(?:[\w.-]+@)?([\w.-]+\.[a-z]+):(?!//)(.+)")
_B64 = re.compile(r"[A-Za-z0-9+/]{8,}={0,2}")
_HEX = re.compile(r"(?:\\x)?(?:[0-9a-fA-F]{2}(?:\\x)?){8,}")


# ----------------------------------------------------------------------------- what a call does

@dataclass
class Facts:
    """What one tool call would do, before any rule looks at it."""
    reads: list = field(default_factory=list)     # (path, cwd) read, listed, executed or mentioned
    writes: list = field(default_factory=list)    # (path, cwd, kind) kind: new | edit | del
    texts: list = field(default_factory=list)     # (path, cwd, text) written into a file
    code: list = field(default_factory=list)      # code that runs now
    words: list = field(default_factory=list)     # every other string: shell words, literals, arguments
    targets: list = field(default_factory=list)   # URLs / host[:port] the call reaches
    queries: list = field(default_factory=list)   # web-search queries
    hits: set = field(default_factory=set)        # rule ids (and markers) that a command form raises by itself
    links: list = field(default_factory=list)     # (source, dest, cwd, kind) kind: link (ln) | copy (cp, rsync ..)
    applies: list = field(default_factory=list)   # (diff file, cwd) a patch / git apply reads its diff from
    trees: list = field(default_factory=list)     # (dir, cwd) read recursively: grep -r, rg, tar c, cp -r ...
    cmds: list = field(default_factory=list)      # the name of every simple command run
    reverts: list = field(default_factory=list)   # (paths, cwd) whose changes a git command discards ([]: all)


def analyze(name, args):
    """Facts for one call, its arguments routed by key and shape."""
    f, lname = Facts(), (name or "").lower()
    writer = bool(WRITER.search(lname)) and "todo" not in lname
    kind = "del" if re.search("delete|remove", lname) else "edit" if re.search("edit|patch|replace|append|insert",
                                                                               lname) else "new"
    cwd = next((v for k, v in _walk(args) if k in CWD_KEYS), ".")
    paths, texts = [], []
    for k, v in _walk(args):
        if k in SHELL_KEYS:
            _Shell(f, cwd).run(v)
        elif k in CODE_KEYS:
            _Shell(f, cwd).code(v)
        elif k in PATH_KEYS or k in CWD_KEYS:
            paths.append(v)
            (f.writes.append((v, cwd, kind)) if writer and k not in CWD_KEYS else f.reads.append((v, cwd)))
            if re.search("grep|search", lname) and not writer and args.get("target") != "files":
                f.trees.append((v, cwd))                # a content search reads its path whole (not a name search)
        elif k in URL_KEYS or URL.match(v):
            f.targets.append(v)
            f.words.append(v)
        elif k == "pattern" and ("glob" in lname or args.get("target") == "files"):
            f.reads.append((posixpath.join(args.get("path") or ".", v), cwd))
        elif k in QUERY_KEYS and "search" in lname and ("web" in lname or lname in ("search", "websearch")):
            f.queries.append(v)
            f.words.append(v)
        elif writer and k in CONTENT_KEYS:
            texts.append(v)
            if k in ("patch", "diff"):
                _Shell(f, cwd).diff_paths(v)
        else:
            f.words.append(v)
    f.texts.extend((paths[0] if paths else None, cwd, t[:MAX_TEXT]) for t in texts)
    return f


def _walk(obj, key=""):
    if isinstance(obj, str):
        yield key, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, str(k).lower())
    elif isinstance(obj, list):
        yield from (x for v in obj for x in _walk(v, key))


class _Shell:
    """Reads a shell command into Facts: one pass over tokens, each simple command handed to cmdread.read_command as
    it ends. word, paths, write, diff_paths, remotes and code record into Facts for the readers of a command."""

    def __init__(self, facts, cwd=".", depth=0, env=None):
        self.f, self.cwd, self.depth, self.vars = facts, cwd or ".", depth, dict(env or {})
        self.out = None                                 # what the last command printed, when known

    def child(self):
        return _Shell(self.f, self.cwd, self.depth + 1, self.vars)

    def run(self, s):
        if not s:
            return
        if self.depth > MAX_DEPTH:
            return self.f.words.append(s)
        s, i, n = s[:MAX_TEXT], 0, min(len(s), MAX_TEXT)
        argv, redirs, word, redir_op, stdin, prev = [], [], None, None, None, None
        hd_line, skip, stack = None, {}, []

        def end_word():
            nonlocal word, redir_op, stdin
            if word is None:
                return
            if redir_op == "<<<":
                stdin = word + "\n"
                self.word(word, net=False)              # base64 -d <<< PAYLOAD | sh: the payload is read
            elif redir_op:
                redirs.append((redir_op, word))
            else:
                argv.append(word)
            word, redir_op = None, None

        def end_cmd(piped=False):
            nonlocal argv, redirs, stdin, prev
            end_word()
            out = read_command(self, argv, redirs, stdin, prev) if argv or redirs else None
            prev, self.out = (out if piped else None), out
            argv, redirs, stdin = [], [], None

        while i < n:
            if word is None and s[i] == "#":           # a comment runs to the end of the line
                i = n if s.find("\n", i) < 0 else s.find("\n", i)
                continue
            m = _TOK.match(s, i)
            if not m:
                word, i = (word or "") + s[i], i + 1
                continue
            k, i = m.lastgroup, m.end()
            if k == "sp":
                end_word()
            elif k == "nl":
                end_cmd()
                i, hd_line = skip.pop(i - 1, i), None   # jump over heredoc bodies that began on this line
            elif k == "op":
                end_cmd(piped=m.group("op") in ("|", "|&"))
                if m.group("op") == "(":
                    stack.append(self.cwd)
                elif m.group("op") == ")" and stack:
                    self.cwd = stack.pop()
            elif k == "hw":                             # heredoc: its body starts after this line
                end_word()
                if hd_line is None:
                    hd_line = s.find("\n", i)
                    if hd_line < 0:
                        continue
                start = skip.get(hd_line, hd_line + 1)
                t = re.compile(r"^\t*" + re.escape(m.group("hw")) + r"[ \t]*$", re.M).search(s, start)
                stdin, skip[hd_line] = (s[start:t.start()], t.end() + 1) if t else (s[start:], n)
                if m.group("hq") == "":                 # unquoted delimiter: $(..) in the body runs
                    for sub in re.findall(r"\$\(([^)]*)\)|`([^`]*)`", stdin):
                        self.child().run(sub[0] or sub[1])
            elif k in ("hs", "rd"):
                end_word()
                redir_op = "<<<" if k == "hs" else m.group("rd")
            elif k == "sub":                            # $(..) or `..`: run it; its known output joins the word
                known, i = self.substitute(s, i, m.group("sub"))
                word = (word or "") + known
            else:
                text = m.group(k)
                if k == "lit" and "\\" in text:
                    text = _ESC.sub(r"\1", text)
                elif k == "an":
                    text = unescape(text)
                elif k == "dq":
                    text = re.sub(r'\\([$`"\\\n])', r"\1", text) if "\\" in text else text
                    text = self.expand(text) if "$(" in text or "`" in text else text
                word = (word or "") + text
        end_cmd()

    def expand(self, text):
        """Double-quoted text with each $(..) and `..` run and replaced by its known output, or ** if unknown."""
        out, i = [], 0
        while True:
            j = min((x for x in (text.find("$(", i), text.find("`", i)) if x >= 0), default=-1)
            if j < 0:
                return "".join(out) + text[i:]
            opener = "`" if text[j] == "`" else "$("
            known, e = self.substitute(text, j + len(opener), opener)
            out += [text[i:j], known]
            i = e

    def substitute(self, s, i, opener):
        """Runs the $(..) or `..` whose body starts at s[i]: (what it adds to its word, the index past its end)."""
        j = _balanced(s, i) if opener == "$(" else s.find("`", i) % (len(s) + 1)    # unclosed: to the end
        sh = self.child()
        sh.run(s[i:j])
        # an unknown output is ** (read like a glob, and told apart from one: nobody globs solu**tion)
        return (sh.out.strip() if sh.out is not None else "**"), j + 1

    def word(self, w, net=True):
        """A word: kept for secrets and tokens; its URLs are targets; base64/hex payloads are decoded and read."""
        self.f.words.append(w)
        if net and "\\" in w:                          # http:\\host\x: a browser reads it as http://host/x
            w = re.sub(r"(?i)\b([a-z][a-z0-9+.-]{1,9}):[\\/]{1,3}", r"\1://", w.replace("\\", "/"))
        if net and "://" in w:
            self.f.targets.extend(m.group(0) for m in URL.finditer(w))
        if "/dev/tcp/" in w or "/dev/udp/" in w:        # bash's own sockets: exec 3<>/dev/tcp/HOST/PORT
            self.f.targets.extend(f"{h}:{p}" for h, p in re.findall(r"/dev/(?:tcp|udp)/([^/\s]+)/(\w+)", w))
        if len(w) < 8 or self.depth >= MAX_DEPTH:
            return
        raw = None
        if _HEX.fullmatch(w):
            raw = bytes.fromhex(w.replace("\\x", ""))
        elif _B64.fullmatch(w):
            try:
                raw = base64.b64decode(w + "=" * (-len(w) % 4), validate=True)
            except ValueError:                          # binascii.Error is one
                pass
        if raw and raw.isascii() and raw.translate(None, b"\n\t\r").decode().isprintable():
            self.child().run(raw.decode())
            self.child().code(raw.decode())

    def paths(self, words):
        for w in words:
            w = (w.split("=", 1)[1] if "=" in w else "") if w.startswith("-") else w     # --file=x
            w = w.removeprefix("@")                     # curl -d @file
            if w and "://" not in w and len(w) < 4096 and not (" " in w or "\n" in w or "(" in w):
                self.f.reads.append((w, self.cwd))

    def write(self, paths, kind, text=None):
        for p in filter(None, paths):
            if "$" in p or "*" in p:
                self.f.hits.add("unknown-write")       # a target only known when it runs
            self.f.writes.append((p, self.cwd, kind))
            if text:
                self.f.texts.append((p, self.cwd, text))

    def diff_paths(self, text):
        """A diff applied: each file it names is an edit (the diff kept as its text)."""
        self.write(diff_files(text), "edit", text)

    def remotes(self, args):
        """The hosts a git command's words name (URLs, user@host:path)."""
        for a in args:
            m = None if "://" in a else _SCP.fullmatch(a)
            self.f.targets.extend([u.group(0) for u in URL.finditer(a)] or
                                  ([f"ssh://{m.group(1)}/{m.group(2)}"] if m else []))

    def code(self, src):
        """Code run now (python -c, execute_code, heredocs into interpreters): read by coderead.py."""
        read_code(self, src[:MAX_TEXT])


def diff_files(text):
    """The files a unified diff or a V4A patch (hermes) changes."""
    names = (m.group(1) or m.group(2) or m.group(3) for m in re.finditer(r"^(?:\+\+\+|---) (?:[ab]/)?(\S+)|"
             r"^\*\*\* (?:Update|Add|Delete) File: (.+)$|^\*\*\* Move to: (.+)$", text, re.M))
    return [p.strip() for p in names if p.strip() != "/dev/null"]


def _balanced(s, i):
    """Index of the ')' that closes a '$(' ending just before s[i], honouring quotes and nesting."""
    depth, n = 1, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 1
        elif c == "'":
            i = n if s.find("'", i + 1) < 0 else s.find("'", i + 1)
        elif c == '"':
            i += 1
            while i < n and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
        elif c in "()":
            depth += 1 if c == "(" else -1
            if depth == 0:
                return i
        i += 1
    return n

"""The guard's reader: what one tool call would do, as Facts, before any rule looks at it.

    f = analyze("bash", {"command": "cd src && echo x > tests/a.py"})    # f.writes == [("tests/a.py", "src", "new")]

Arguments are routed by key and shape across pi, opencode and hermes (command/cmd -> shell, code -> code, path keys ->
paths, url -> URLs, content/newText/new_string/patch -> written text). Shell is tokenized (quotes, pipes, subshells,
heredocs, sh -c, eval, xargs, find -exec, payloads, ...); a $(..) or backtick part of a word becomes its output when
known (echo, printf), else `**`: solu$(true)tion reads as a glob for "solution". A program outside READERS and the
writers known here writes its path arguments (kind "unknown": the rules fail closed on protected ones). Left out:
code run now (coderead.py), judging (guardrules.py), what a script written now does later, strings built at run
time (chr(), reversed, downloaded, tr, rev), `cd` across hermes terminal calls, shell functions and glob expansion
(a glob stays a pattern), what an archive holds.
"""
import base64
import posixpath
import re
from dataclasses import dataclass, field

from coderead import read_code, unescape
from gitread import read_git

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

SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "ash", "fish", "busybox"}
WRAPPERS = {"sudo", "doas", "nohup", "nice", "time", "timeout", "stdbuf", "exec", "command", "builtin", "ionice",
            "strace", "chronic", "unbuffer", "watch", "env", "!", "{", "}", "then", "do", "else", "elif", "if",
            "while", "until", "done", "fi", "esac"}
TEXT_CMDS = {"echo", "printf", "grep", "egrep", "fgrep", "rg", "ag", "ack", "sed", "awk", "cat", "head", "tail",
             "test", "[", "jq", "sort", "wc", "cut", "tr", "diff", "less", "more", "sha256sum", "md5sum", "git"}
PATTERN_FIRST = {"sed", "grep", "egrep", "fgrep", "rg", "ag", "ack", "awk", "gawk", "jq"}
NET_CMDS = {"curl", "wget", "http", "https", "aria2c", "lynx", "w3m", "links", "ssh", "scp", "sftp", "rsync", "mosh",
            "telnet", "nc", "ncat", "netcat", "socat", "ping", "traceroute", "dig", "nslookup", "host", "whois",
            "ftp", "mysql", "psql", "redis-cli", "mongo", "mongosh"}
CURL_VALUE_OPTS = {"-o", "-d", "-H", "-X", "-u", "-A", "-e", "-b", "-c", "-F", "-T", "-w", "-m", "-O", "-P", "-U",
                   "-Y", "-y", "-r", "-C", "--output", "--data", "--data-raw", "--data-binary", "--data-urlencode",
                   "--header", "--request", "--user", "--user-agent", "--referer", "--cookie", "--cookie-jar",
                   "--form", "--upload-file", "--write-out", "--max-time", "--output-document",
                   "--directory-prefix", "--post-data", "--post-file", "--body-data"}
# READERS read, list or run what they are given (any other program writes it: "unknown"); FORMATTERS unless checking
READERS = set("""cat tac head tail less more nl wc grep egrep fgrep zgrep rg ag ack diff cmp comm ls dir tree stat
file du df sum cksum md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum sort uniq cut paste join column
fold fmt od xxd hexdump strings jq yq sed awk gawk mawk echo printf test [ [[ readlink realpath basename dirname pwd
which type whereis hash true false : sleep date printenv id whoami uname hostname nproc free ps pgrep history alias
source . exit return wait jobs kill clear read shift unset trap umask ulimit seq yes expr bc dc base64 base32 basenc
rev tr iconv mkdir cd pushd popd export declare typeset local readonly set compgen locate mlocate plocate find xargs
pytest py.test pip pip3 uv poetry pipenv conda npm yarn pnpm make cmake ninja cargo rustc go gcc g++ cc clang clang++
javac java mvn gradle tox nox mypy pyright flake8 pylint pyflakes pycodestyle pydocstyle bandit coverage nose2 jest
mocha vitest tsc""".split())
FORMATTERS = {"black": ("--check", "--diff"), "isort": ("--check", "--check-only", "-c", "--diff"), "ruff": None,
              "rustfmt": ("--check",), **dict.fromkeys("prettier eslint autopep8 yapf gofmt clang-format".split())}
MODEL_CLIS = {"llm", "openai", "litellm", "ollama", "aider", "claude", "codex", "opencode", "hermes", "gemini"}

_TOK = re.compile(r"""(?P<sp>[ \t\r]+|\\\n)|(?P<nl>\n)|(?P<op>\|\||&&|;;|\|&|[|&;()])
  |(?P<hd><<-?)[ \t]*(?P<hq>['"]?)(?P<hw>[\w.@%+-]+)(?P=hq)|(?P<hs><<<)|(?P<rd>\d*(?:&>>|>>|&>|>&|>\||<>|<&|[<>]))
  |'(?P<sq>[^']*)'|\$'(?P<an>(?:[^'\\]|\\.)*)'|"(?P<dq>(?:[^"\\]|\\.)*)"|(?P<sub>\$\(|`)
  |(?P<lit>(?:[^\s'"\\|&;<>()`$]|\\.|\$(?![('])|\\$)+)""", re.X | re.S)
_ASSIGN = re.compile(r"[A-Za-z_]\w*=")
_VAR = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
_ESC = re.compile(r"\\(.)", re.S)
_CODE_FLAG = re.compile(r"-\w*[ce]\w*|-p|-r|--eval|--command")
EDITORS = ("ed", "red", "ex", "vi", "vim", "nvim", "sponge", "emacs", "nano", "joe", "jed", "kak", "micro", "mcedit")
_INTERP = re.compile(r"python[\d.]*|pypy[\d.]*|node|nodejs|deno|bun|perl|ruby|php")
URL = re.compile(r"\b([a-z][a-z0-9+.-]{1,9})://([^\s'\"<>`|;)]*)", re.I)
_HOSTISH = re.compile(r"(?:[\w.+-]+@)?((?:[a-z0-9-]+\.)+[a-z][a-z0-9-]*|\d{1,3}(?:\.\d{1,3}){3}|localhost"
                      r"|\[[0-9a-f:.]+\])(?::(\d+))?(?:[:/].*)?$", re.I)
_SCP = re.compile(r"(?:[\w.-]+@)?([\w.-]+\.[a-z]+):(?!//)(.+)")
_CURL_OPTV = re.compile(r"-[a-zA-Z]+[odHXuAebcFTwmOPUY]")                    # -fsSLo FILE: a value follows
_B64 = re.compile(r"[A-Za-z0-9+/]{8,}={0,2}")
_SED_W = re.compile(r"(?:^|[;\n{}/]|\d)\s*w\s+([^\s;}]+)|s(.).*?\2.*?\2[gpiIm\d]*w\s+([^\s;}]+)")   # w FILE
_AWK_OUT, _AWK_RUN = re.compile(r'>>?\s*"([^"]+)"'), re.compile(r'system\(\s*"([^"]*)"')
_HEX = re.compile(r"(?:\\x)?(?:[0-9a-fA-F]{2}(?:\\x)?){8,}")
SECRET_VAR = re.compile(r"\$\{?!?((?:[A-Z0-9_]*_)?(?:TOKEN|API_?KEY|SECRET(?:_KEY)?|PASSWORD|PASSWD|CREDENTIALS?|"
                        r"ACCESS_KEY(?:_ID)?|PRIVATE_KEY|AUTH_KEY|KEY))\b")


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
    """Reads a shell command into Facts: one pass over tokens, each simple command handled as it ends."""

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
            out = self.command(argv, redirs, stdin, prev) if argv or redirs else None
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

    def command(self, argv, redirs, stdin, prev):
        """One simple command; returns what it prints when that is known (echo, printf, cat of a heredoc)."""
        f, words = self.f, []
        for w in argv:                                  # $VAR expansion with what this command line set
            x = _VAR.sub(lambda m: self.vars.get(m.group(1), m.group(0)), w) if "$" in w else w
            words.extend(x.split() if x != w and " " in x else [x])
        argv = words
        while argv and _ASSIGN.match(argv[0]):
            k, v = argv.pop(0).split("=", 1)
            self.vars[k] = v
            self.word(v, net=bool(argv))
        if argv[:1] == ["for"] and argv[2:3] == ["in"]:
            self.vars[argv[1]] = " ".join(argv[3:])
            return self.paths(argv[3:])
        while argv and argv[0] in WRAPPERS:             # sudo, env, timeout 5, nice -n 5, if, then, do ...
            w = argv.pop(0)
            while argv and (argv[0].startswith("-") or (w == "env" and _ASSIGN.match(argv[0]))):
                if argv.pop(0) in ("-u", "-g", "-n", "-s", "-k", "-c", "--signal") and w != "env" and argv:
                    argv.pop(0)
            if w == "timeout" and argv:
                argv.pop(0)
            if w == "env" and not argv:
                f.hits.add("credentials")              # bare `env` dumps the environment
        if not argv:
            return self.redirect(redirs, stdin, None)
        name, args = posixpath.basename(argv[0]), argv[1:]
        f.cmds.append(name)
        for w in argv:
            self.word(w, net=name not in TEXT_CMDS)
        opts = {a for a in args if a.startswith("-")}
        pos = [a for a in args if not a.startswith("-")]
        script = name in PATTERN_FIRST and pos and not opts & {"-e", "-f", "--regexp", "--file", "--expression"}
        if name not in ("echo", "printf"):              # every other word may be a path (sed's script is not)
            self.paths(([argv[0]] if "/" in argv[0] else []) + [a for a in args if not (script and a is pos[0])])
        code_at = next((j + 1 for j, a in enumerate(args[:-1]) if a[:1] == "-" and _CODE_FLAG.fullmatch(a)), None)
        if name in SHELLS:
            if code_at is not None:
                self.child().run(args[code_at])
            elif stdin or (prev and not pos):
                self.child().run(stdin or prev)
        elif name == "eval":
            self.child().run(" ".join(args))
        elif _INTERP.fullmatch(name):
            if "-m" in args[:-1]:                       # python -m pip / pytest ...: the module as a command
                return self.command(args[args.index("-m") + 1:], redirs, stdin, prev)
            if code_at is not None:
                self.code(args[code_at])
            elif stdin or (prev and (not pos or pos[0] == "-")):
                self.code(stdin or prev)
        elif name in ("cd", "pushd") and len(self.cwd) < 256:
            self.cwd = "~" if not pos else pos[0] if pos[0].startswith(("/", "~", "$")) else \
                posixpath.normpath(posixpath.join(self.cwd, pos[0]))
        elif name == "git":
            read_git(self, args, stdin)
        elif name in ("kaggle", "huggingface-cli", "hf", "gsutil", "gcloud", "aws", "s5cmd", "rclone", "az", "gh"):
            self.storage(name, args)
        elif name == "printenv" and (not pos or any(SECRET_VAR.search("$" + a) for a in pos)):
            f.hits.add("credentials")
        elif name in ("export", "declare", "typeset", "local", "readonly", "set", "compgen"):
            self.vars.update(a.split("=", 1) for a in pos if _ASSIGN.match(a))
            if any(a.startswith(("PYTEST_ADDOPTS=", "PYTEST_PLUGINS=")) for a in pos):
                f.hits.add("reward-hacking")           # options for every later pytest run, the grader's too
            if name != "local" and (not pos or opts & {"-p", "-x", "-e", "-v"}) and not any("=" in a for a in pos):
                f.hits.add("credentials")              # export -p, declare -x, set: the environment
        elif name == "ps" and any("e" in a for a in args if not a.startswith("--")) and "-e" not in args:
            f.hits.add("credentials")                  # ps eww shows every process's environment
        elif name in MODEL_CLIS or (name == "pi" and opts & {"-p", "--print", "--mode"}):
            f.hits.add("credentials")
        elif name in ("rm", "unlink", "shred", "rmdir", "srm"):
            self.write(pos, "del")
        elif name in ("truncate", "chmod", "chown", "chgrp", "chattr", "setfacl"):
            self.write(pos if name == "truncate" else pos[1:], "edit")
        elif name == "touch":
            self.write(pos, "new")
        elif name in EDITORS:                          # scripted editors write the files they are given
            self.write(pos, "edit")
        elif name in ("cp", "install", "rsync", "scp", "ln", "mv"):
            t = next((args[j + 1] for j, a in enumerate(args[:-1]) if a in ("-t", "--target-directory")), None)
            dest = t or (pos[-1] if len(pos) > 1 else None)
            if name == "mv":
                self.write([p for p in pos if p != dest], "del")
            self.write([dest], "new")
            f.links.extend((p, dest, self.cwd, "link" if name == "ln" else "copy") for p in pos if dest and p != dest)
            if name != "ln" and opts & {"-r", "-R", "-a", "--recursive", "--archive"} or name in ("rsync", "scp"):
                f.trees.extend((p, self.cwd) for p in pos if p != dest)
            if "--remove-source-files" in opts:         # rsync: a move
                self.write([p for p in pos if p != dest], "del")
        elif name in ("tar", "bsdtar", "unzip", "7z", "unrar", "cpio"):
            self.archive(name, args, pos)
        elif name == "zip":                             # zip -r out.zip DIR reads DIR whole; -m takes its inputs
            f.trees.extend((p, self.cwd) for p in pos[1:])
            self.write(pos[:1], "new")
            self.write(pos[1:], "del" if any("m" in o.lstrip("-") for o in opts if not o.startswith("--")) or
                       "--move" in opts else "unknown")
        elif name == "dd":
            self.write([a[3:] for a in args if a.startswith("of=")], "new")
        elif name == "tee":
            self.write(pos, "edit" if opts & {"-a", "--append"} else "new", stdin or prev)
        elif name == "patch":                          # patch [FILE [DIFF]] [-i DIFF] [< DIFF]
            diff = next((args[j + 1] for j, a in enumerate(args[:-1]) if a in ("-i", "--input")), None)
            pos = [a for a in pos if a != diff]
            self.write(pos[:1], "edit")
            f.applies.extend((d, self.cwd) for d in [diff] + pos[1:2] + [t for op, t in redirs if op == "<"] if d)
            self.diff_paths(stdin or prev or "")
        elif name == "find":
            self.find(args)
        elif name == "xargs":                           # its arguments come from the previous stage
            if not prev:
                f.hits.add("unknown-write")
            return self.command([a for a in args if not a.startswith("-")] + (prev or "").split(), redirs, stdin, None)
        elif name in ("locate", "mlocate", "plocate"):
            f.reads.extend(("/" + p.strip("*/"), "/") for p in pos)
        elif name in ("rg", "ag", "ack", "grep", "egrep", "fgrep", "zgrep") and (name in ("rg", "ag", "ack") or any(
                re.fullmatch(r"-\w*[rR]\w*|--recursive|--dereference-recursive", a) for a in opts)):
            skip = 0 if any(a in ("-e", "-f", "--regexp", "--file") for a in opts) else 1
            f.trees.extend((p, self.cwd) for p in pos[skip:] or ["."])
        elif name in ("npx", "bunx", "uvx") and pos:   # npx prettier --write x: the program it runs
            return self.command(args[args.index(pos[0]):], redirs, stdin, prev)
        elif name in FORMATTERS:                       # black tests/, prettier --write, ruff check --fix
            checks, fix = FORMATTERS[name], opts & {"--write", "-w", "--fix", "-i", "--in-place", "--fix-only"}
            if not opts & set(checks) if checks else fix or pos[:1] == ["format"] and not opts & {"--check", "--diff"}:
                self.write([a for a in pos if a not in ("check", "format")], "edit")
        elif name not in READERS and name not in NET_CMDS and not _INTERP.fullmatch(name):
            self.write(pos, "unknown")                 # a program whose role for its arguments is unknown
        if (name in SHELLS or _INTERP.fullmatch(name)) and code_at is None and not (stdin or prev):
            self.write(pos[1:], "unknown")             # python fix.py tests/test_x.py: what fix.py does with it
        if name in NET_CMDS:
            self.net(name, args)
        progs = [args[j + 1] for j, a in enumerate(args[:-1]) if a in ("-e", "--expression")] + pos[:bool(script)]
        for prog in progs if name in ("sed", "awk", "gawk", "mawk") else ():    # sed's w FILE, awk's print > "FILE"
            self.write([a or c for a, _, c in _SED_W.findall(prog)] if name == "sed" else _AWK_OUT.findall(prog), "new")
            for cmd in _AWK_RUN.findall(prog) if name != "sed" else ():
                self.child().run(cmd)
        if name in ("sed", "perl") and any(a.startswith("-i") or a == "--in-place" or
                                           (name == "perl" and re.fullmatch(r"-\w*i\w*", a)) for a in args):
            expr = any(a in ("-e", "--expression", "-f") or a.endswith("e") for a in opts)
            self.write(pos if expr else pos[1:], "edit")
        out = None
        if name == "printf" and pos:
            vals = iter(pos[1:])
            out = unescape(re.sub(r"%[-\d.]*[sdb]", lambda m: next(vals, ""), pos[0]))
            f.words.append(out)                         # what it prints is the model's own text too
        elif name == "echo":
            out = unescape(" ".join(pos)) if "-e" in opts else " ".join(pos)
            f.words.append(out)
        elif name == "cat" and not pos:
            out = stdin
        elif name == "rev" and not pos and (stdin or prev) is not None:      # a path spelled backwards, turned round
            out = "\n".join(line[::-1] for line in (stdin or prev).split("\n"))
            f.words.append(out)
        elif name == "base64" and opts & {"-d", "--decode", "-D"} and not pos and (stdin or prev):
            try:                                        # "$(echo cmV3YXJk... | base64 -d)": the name it prints
                out = base64.b64decode("".join((stdin or prev).split()) + "==", validate=False).decode()
            except ValueError:                          # not base64, not text: unknown
                pass
        self.redirect(redirs, stdin if name == "cat" else None, out)
        return out

    def redirect(self, redirs, stdin, out):
        for op, target in redirs:
            target = _VAR.sub(lambda m: self.vars.get(m.group(1), m.group(0)), target)
            if ">" in op and not (target.isdigit() or target in ("-", "/dev/null", "/dev/stdout", "/dev/stderr")):
                self.write([target], "edit" if ">>" in op else "new", stdin or out)
            elif op == "<":
                self.f.reads.append((target, self.cwd))

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

    def archive(self, name, args, pos):
        """An archive extracted into a dir (tar x -C DIR, unzip -d DIR) writes there; one created reads its inputs."""
        modes = args[:1] + [a for a in args[1:] if a.startswith("-") and not a.startswith("--")]
        extract = name not in ("tar", "bsdtar") or any(a in ("--extract", "--get") for a in args) or \
            any("x" in m.lstrip("-") and m.lstrip("-").isalpha() for m in modes)
        dest = next((args[j + 1] if "=" not in a else a.split("=", 1)[1] for j, a in enumerate(args[:-1] + [""])
                     if a.split("=")[0] in ("-C", "--directory", "-d") or (name == "7z" and a.startswith("-o"))), None)
        if name == "7z" and dest is None:
            dest = next((a[2:] for a in args if a.startswith("-o")), None)
        if extract:
            self.write([dest or "."], "edit")
        elif name in ("tar", "bsdtar"):                 # tar czf x.tgz -C DIR .: DIR's files
            self.f.trees.extend((posixpath.join(dest or "", p), self.cwd) for p in pos[1:] if p != dest)
            if "--remove-files" in args:
                self.write([posixpath.join(dest or "", p) for p in pos[1:] if p != dest], "del")

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

    def find(self, args):
        """Matches: each -path (as given and under each root) joined with each -name, else each root with each -name;
        -exec runs its command per match in place of {} (find -path '*x*' -name a -exec cp {} b: a read of x/a)."""
        roots = args[:next((j for j, a in enumerate(args) if a.startswith(("-", "(", "!"))), len(args))] or ["."]
        names, paths = ([args[j + 1] for j in range(len(args) - 1) if args[j] in k]
                        for k in (("-name", "-iname"), ("-path", "-ipath", "-wholename")))
        paths = [posixpath.join(r, p) for r in roots for p in paths] + paths
        hits = [posixpath.join(p, n) for p in paths for n in names] or paths or \
            [posixpath.join(r, n) for r in roots for n in names] or roots
        self.f.reads.extend((p, self.cwd) for p in hits)
        for j, a in enumerate(args):
            if a == "-delete" or (a in ("-exec", "-execdir") and args[j + 1:j + 2] in (["rm"], ["mv"])):
                self.write(hits, "del")
            elif a in ("-exec", "-execdir", "-ok") and j + 1 < len(args):
                sub = args[j + 1:]
                sub = sub[:next((k for k, x in enumerate(sub) if x in (";", "+", "\\;")), len(sub))]
                for h in hits:
                    self.command([h if x == "{}" else x for x in sub], [], None, None)

    def remotes(self, args):
        """The hosts a git command's words name (URLs, user@host:path)."""
        for a in args:
            m = None if "://" in a else _SCP.fullmatch(a)
            self.f.targets.extend([u.group(0) for u in URL.finditer(a)] or
                                  ([f"ssh://{m.group(1)}/{m.group(2)}"] if m else []))

    def net(self, name, args):
        f, j = self.f, 0
        while j < len(args):
            a, key = args[j], args[j].split("=")[0]
            if key in ("--resolve", "--connect-to", "--doh-url", "--dns-servers", "--dns-ipv4-addr"):
                f.hits.add("hosts")                     # ways around the host check
            if key in ("-x", "--proxy", "--preproxy", "--socks5", "--socks5-hostname", "-h", "--host"):
                f.targets.append(a.split("=", 1)[1] if "=" in a else args[j + 1] if j + 1 < len(args) else "")
                j += "=" not in a
            elif name in ("curl", "wget", "http", "https") and (a in CURL_VALUE_OPTS or _CURL_OPTV.fullmatch(a)):
                j += 1                                  # an option value, but @file / -F x=@file are reads
                v = args[j] if j < len(args) else ""
                if v.startswith("@") or (a == "-F" and "=@" in v):
                    f.reads.append((v.split("@", 1)[1].split(";")[0], self.cwd))
            elif a.startswith("@") and name == "dig":   # dig @server
                f.targets.append(a[1:])
            elif not a.startswith("-") and "://" not in a:
                m = _HOSTISH.match(a)
                if m and (name in ("curl", "wget", "http", "https", "ssh", "sftp") or "." in a or
                          m.group(1) == "localhost") and not (name in ("scp", "rsync") and not re.search("[:@]", a)):
                    f.targets.append(a)
            if name == "socat":
                f.targets.extend(f"{h}:{p}" for h, p in re.findall(r"TCP\d?:([^:,]+):(\d+)", a, re.I))
            if not a.startswith("-") and ("$" in a or "**" in a):
                f.targets.append("?")                   # a target only known when it runs: the hosts rule fails closed
            j += 1

    def storage(self, name, args):
        """Dataset hubs, notebooks and buckets reached through their CLIs become URL targets."""
        f, pos = self.f, [a for a in args if not a.startswith("-")]
        if name == "kaggle":
            kind = {"datasets": "datasets", "d": "datasets", "kernels": "code", "k": "code", "competitions":
                    "competitions", "c": "competitions", "models": "models"}.get(pos[0] if pos else "")
            refs = [p for p in pos[2:] if "/" in p or kind == "competitions"]
            f.targets.extend(f"https://www.kaggle.com/{kind}/{r}" for r in refs or [""])
        elif name in ("huggingface-cli", "hf") and pos[:1] and pos[0] in ("download", "upload", "datasets", "buckets"):
            ds = "dataset" in " ".join(args) or pos[0] != "download"
            f.targets.extend(f"https://huggingface.co/{'datasets/' if ds else ''}{p}" for p in pos[1:2] or [""])
        elif name in ("gsutil", "s5cmd", "rclone") or (name, pos[:1]) in (("gcloud", ["storage"]), ("aws", ["s3"]),
                                                                           ("aws", ["s3api"]), ("az", ["storage"])):
            if not any("://" in p for p in pos):        # listing buckets: locating one
                f.targets.append("gs://" if name in ("gsutil", "gcloud") else "s3://")
        if pos[:1] and pos[0] in ("configure", "sts", "iam", "secretsmanager", "ssm", "auth", "login", "account"):
            f.hits.add("credentials")

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

"""The guard's reader of one simple command, its words already expanded by the shell reader that met it
(shellread.py): what the program does with its arguments, into the Facts of that shell.

Programs are known by role: READERS read, list or run what they are given; the writers known here (rm, cp, mv, ln,
tee, touch, dd, patch, editors, archives, sed -i / perl -i, formatters unless checking, sed's w FILE, awk's print >
"FILE", redirections) write theirs; a program outside READERS and the writers known here writes its path arguments
(kind "unknown": the rules fail closed on protected ones). Wrappers (sudo, env, timeout, if/then/do, ...) are peeled
off; shells and interpreters run their code (sh -c, python -c, a heredoc or a pipe into them), as do eval, xargs and
find -exec; network clients (curl, wget, ssh, nc, ...) and the CLIs of dataset hubs and buckets (kaggle, hf, aws s3,
gsutil, ...) reach their hosts; commands that dump the environment or call a model raise the credentials rule; echo,
printf, cat, rev and base64 -d print what a later stage reads. Left out: git's subcommands (gitread.py), code run
now (coderead.py), what a script written now does later (its path arguments are unknown writes), what an archive
holds, which option takes a value (known for curl, wget and a few more; else its value reads as an argument).
"""
import base64
import posixpath
import re

from coderead import unescape
from gitread import read_git

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
_ASSIGN = re.compile(r"[A-Za-z_]\w*=")
_VAR = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
_CODE_FLAG = re.compile(r"-\w*[ce]\w*|-p|-r|--eval|--command")
EDITORS = ("ed", "red", "ex", "vi", "vim", "nvim", "sponge", "emacs", "nano", "joe", "jed", "kak", "micro", "mcedit")
_INTERP = re.compile(r"python[\d.]*|pypy[\d.]*|node|nodejs|deno|bun|perl|ruby|php")
_HOSTISH = re.compile(r"(?:[\w.+-]+@)?((?:[a-z0-9-]+\.)+[a-z][a-z0-9-]*|\d{1,3}(?:\.\d{1,3}){3}|localhost"
                      r"|\[[0-9a-f:.]+\])(?::(\d+))?(?:[:/].*)?$", re.I)
_CURL_OPTV = re.compile(r"-[a-zA-Z]+[odHXuAebcFTwmOPUY]")                    # -fsSLo FILE: a value follows
_SED_W = re.compile(r"(?:^|[;\n{}/]|\d)\s*w\s+([^\s;}]+)|s(.).*?\2.*?\2[gpiIm\d]*w\s+([^\s;}]+)")   # w FILE
_AWK_OUT, _AWK_RUN = re.compile(r'>>?\s*"([^"]+)"'), re.compile(r'system\(\s*"([^"]*)"')
SECRET_VAR = re.compile(r"\$\{?!?((?:[A-Z0-9_]*_)?(?:TOKEN|API_?KEY|SECRET(?:_KEY)?|PASSWORD|PASSWD|CREDENTIALS?|"
                        r"ACCESS_KEY(?:_ID)?|PRIVATE_KEY|AUTH_KEY|KEY))\b")


def read_command(sh, argv, redirs, stdin, prev):
    """One simple command; returns what it prints when that is known (echo, printf, cat of a heredoc)."""
    f, words = sh.f, []
    for w in argv:                                  # $VAR expansion with what this command line set
        x = _VAR.sub(lambda m: sh.vars.get(m.group(1), m.group(0)), w) if "$" in w else w
        words.extend(x.split() if x != w and " " in x else [x])
    argv = words
    while argv and _ASSIGN.match(argv[0]):
        k, v = argv.pop(0).split("=", 1)
        sh.vars[k] = v
        sh.word(v, net=bool(argv))
    if argv[:1] == ["for"] and argv[2:3] == ["in"]:
        sh.vars[argv[1]] = " ".join(argv[3:])
        return sh.paths(argv[3:])
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
        return _redirect(sh, redirs, stdin, None)
    name, args = posixpath.basename(argv[0]), argv[1:]
    f.cmds.append(name)
    for w in argv:
        sh.word(w, net=name not in TEXT_CMDS)
    opts = {a for a in args if a.startswith("-")}
    pos = [a for a in args if not a.startswith("-")]
    script = name in PATTERN_FIRST and pos and not opts & {"-e", "-f", "--regexp", "--file", "--expression"}
    if name not in ("echo", "printf"):              # every other word may be a path (sed's script is not)
        sh.paths(([argv[0]] if "/" in argv[0] else []) + [a for a in args if not (script and a is pos[0])])
    code_at = next((j + 1 for j, a in enumerate(args[:-1]) if a[:1] == "-" and _CODE_FLAG.fullmatch(a)), None)
    if name in SHELLS:
        if code_at is not None:
            sh.child().run(args[code_at])
        elif stdin or (prev and not pos):
            sh.child().run(stdin or prev)
    elif name == "eval":
        sh.child().run(" ".join(args))
    elif _INTERP.fullmatch(name):
        if "-m" in args[:-1]:                       # python -m pip / pytest ...: the module as a command
            return read_command(sh, args[args.index("-m") + 1:], redirs, stdin, prev)
        if code_at is not None:
            sh.code(args[code_at])
        elif stdin or (prev and (not pos or pos[0] == "-")):
            sh.code(stdin or prev)
    elif name in ("cd", "pushd") and len(sh.cwd) < 256:
        sh.cwd = "~" if not pos else pos[0] if pos[0].startswith(("/", "~", "$")) else \
            posixpath.normpath(posixpath.join(sh.cwd, pos[0]))
    elif name == "git":
        read_git(sh, args, stdin)
    elif name in ("kaggle", "huggingface-cli", "hf", "gsutil", "gcloud", "aws", "s5cmd", "rclone", "az", "gh"):
        _storage(sh, name, args)
    elif name == "printenv" and (not pos or any(SECRET_VAR.search("$" + a) for a in pos)):
        f.hits.add("credentials")
    elif name in ("export", "declare", "typeset", "local", "readonly", "set", "compgen"):
        sh.vars.update(a.split("=", 1) for a in pos if _ASSIGN.match(a))
        if any(a.startswith(("PYTEST_ADDOPTS=", "PYTEST_PLUGINS=")) for a in pos):
            f.hits.add("reward-hacking")           # options for every later pytest run, the grader's too
        if name != "local" and (not pos or opts & {"-p", "-x", "-e", "-v"}) and not any("=" in a for a in pos):
            f.hits.add("credentials")              # export -p, declare -x, set: the environment
    elif name == "ps" and any("e" in a for a in args if not a.startswith("--")) and "-e" not in args:
        f.hits.add("credentials")                  # ps eww shows every process's environment
    elif name in MODEL_CLIS or (name == "pi" and opts & {"-p", "--print", "--mode"}):
        f.hits.add("credentials")
    elif name in ("rm", "unlink", "shred", "rmdir", "srm"):
        sh.write(pos, "del")
    elif name in ("truncate", "chmod", "chown", "chgrp", "chattr", "setfacl"):
        sh.write(pos if name == "truncate" else pos[1:], "edit")
    elif name == "touch":
        sh.write(pos, "new")
    elif name in EDITORS:                          # scripted editors write the files they are given
        sh.write(pos, "edit")
    elif name in ("cp", "install", "rsync", "scp", "ln", "mv"):
        t = next((args[j + 1] for j, a in enumerate(args[:-1]) if a in ("-t", "--target-directory")), None)
        dest = t or (pos[-1] if len(pos) > 1 else None)
        if name == "mv":
            sh.write([p for p in pos if p != dest], "del")
        sh.write([dest], "new")
        f.links.extend((p, dest, sh.cwd, "link" if name == "ln" else "copy") for p in pos if dest and p != dest)
        if name != "ln" and opts & {"-r", "-R", "-a", "--recursive", "--archive"} or name in ("rsync", "scp"):
            f.trees.extend((p, sh.cwd) for p in pos if p != dest)
        if "--remove-source-files" in opts:         # rsync: a move
            sh.write([p for p in pos if p != dest], "del")
    elif name in ("tar", "bsdtar", "unzip", "7z", "unrar", "cpio"):
        _archive(sh, name, args, pos)
    elif name == "zip":                             # zip -r out.zip DIR reads DIR whole; -m takes its inputs
        f.trees.extend((p, sh.cwd) for p in pos[1:])
        sh.write(pos[:1], "new")
        sh.write(pos[1:], "del" if any("m" in o.lstrip("-") for o in opts if not o.startswith("--")) or
                 "--move" in opts else "unknown")
    elif name == "dd":
        sh.write([a[3:] for a in args if a.startswith("of=")], "new")
    elif name == "tee":
        sh.write(pos, "edit" if opts & {"-a", "--append"} else "new", stdin or prev)
    elif name == "patch":                          # patch [FILE [DIFF]] [-i DIFF] [< DIFF]
        diff = next((args[j + 1] for j, a in enumerate(args[:-1]) if a in ("-i", "--input")), None)
        pos = [a for a in pos if a != diff]
        sh.write(pos[:1], "edit")
        f.applies.extend((d, sh.cwd) for d in [diff] + pos[1:2] + [t for op, t in redirs if op == "<"] if d)
        sh.diff_paths(stdin or prev or "")
    elif name == "find":
        _find(sh, args)
    elif name == "xargs":                           # its arguments come from the previous stage
        if not prev:
            f.hits.add("unknown-write")
        return read_command(sh, [a for a in args if not a.startswith("-")] + (prev or "").split(), redirs, stdin, None)
    elif name in ("locate", "mlocate", "plocate"):
        f.reads.extend(("/" + p.strip("*/"), "/") for p in pos)
    elif name in ("rg", "ag", "ack", "grep", "egrep", "fgrep", "zgrep") and (name in ("rg", "ag", "ack") or any(
            re.fullmatch(r"-\w*[rR]\w*|--recursive|--dereference-recursive", a) for a in opts)):
        skip = 0 if any(a in ("-e", "-f", "--regexp", "--file") for a in opts) else 1
        f.trees.extend((p, sh.cwd) for p in pos[skip:] or ["."])
    elif name in ("npx", "bunx", "uvx") and pos:   # npx prettier --write x: the program it runs
        return read_command(sh, args[args.index(pos[0]):], redirs, stdin, prev)
    elif name in FORMATTERS:                       # black tests/, prettier --write, ruff check --fix
        checks, fix = FORMATTERS[name], opts & {"--write", "-w", "--fix", "-i", "--in-place", "--fix-only"}
        if not opts & set(checks) if checks else fix or pos[:1] == ["format"] and not opts & {"--check", "--diff"}:
            sh.write([a for a in pos if a not in ("check", "format")], "edit")
    elif name not in READERS and name not in NET_CMDS and not _INTERP.fullmatch(name):
        sh.write(pos, "unknown")                 # a program whose role for its arguments is unknown
    if (name in SHELLS or _INTERP.fullmatch(name)) and code_at is None and not (stdin or prev):
        sh.write(pos[1:], "unknown")             # python fix.py tests/test_x.py: what fix.py does with it
    if name in NET_CMDS:
        _net(sh, name, args)
    progs = [args[j + 1] for j, a in enumerate(args[:-1]) if a in ("-e", "--expression")] + pos[:bool(script)]
    for prog in progs if name in ("sed", "awk", "gawk", "mawk") else ():    # sed's w FILE, awk's print > "FILE"
        sh.write([a or c for a, _, c in _SED_W.findall(prog)] if name == "sed" else _AWK_OUT.findall(prog), "new")
        for cmd in _AWK_RUN.findall(prog) if name != "sed" else ():
            sh.child().run(cmd)
    if name in ("sed", "perl") and any(a.startswith("-i") or a == "--in-place" or
                                       (name == "perl" and re.fullmatch(r"-\w*i\w*", a)) for a in args):
        expr = any(a in ("-e", "--expression", "-f") or a.endswith("e") for a in opts)
        sh.write(pos if expr else pos[1:], "edit")
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
    _redirect(sh, redirs, stdin if name == "cat" else None, out)
    return out


def _redirect(sh, redirs, stdin, out):
    for op, target in redirs:
        target = _VAR.sub(lambda m: sh.vars.get(m.group(1), m.group(0)), target)
        if ">" in op and not (target.isdigit() or target in ("-", "/dev/null", "/dev/stdout", "/dev/stderr")):
            sh.write([target], "edit" if ">>" in op else "new", stdin or out)
        elif op == "<":
            sh.f.reads.append((target, sh.cwd))


def _archive(sh, name, args, pos):
    """An archive extracted into a dir (tar x -C DIR, unzip -d DIR) writes there; one created reads its inputs."""
    modes = args[:1] + [a for a in args[1:] if a.startswith("-") and not a.startswith("--")]
    extract = name not in ("tar", "bsdtar") or any(a in ("--extract", "--get") for a in args) or \
        any("x" in m.lstrip("-") and m.lstrip("-").isalpha() for m in modes)
    dest = next((args[j + 1] if "=" not in a else a.split("=", 1)[1] for j, a in enumerate(args[:-1] + [""])
                 if a.split("=")[0] in ("-C", "--directory", "-d") or (name == "7z" and a.startswith("-o"))), None)
    if name == "7z" and dest is None:
        dest = next((a[2:] for a in args if a.startswith("-o")), None)
    if extract:
        sh.write([dest or "."], "edit")
    elif name in ("tar", "bsdtar"):                 # tar czf x.tgz -C DIR .: DIR's files
        sh.f.trees.extend((posixpath.join(dest or "", p), sh.cwd) for p in pos[1:] if p != dest)
        if "--remove-files" in args:
            sh.write([posixpath.join(dest or "", p) for p in pos[1:] if p != dest], "del")


def _find(sh, args):
    """Matches: each -path (as given and under each root) joined with each -name, else each root with each -name;
    -exec runs its command per match in place of {} (find -path '*x*' -name a -exec cp {} b: a read of x/a)."""
    roots = args[:next((j for j, a in enumerate(args) if a.startswith(("-", "(", "!"))), len(args))] or ["."]
    names, paths = ([args[j + 1] for j in range(len(args) - 1) if args[j] in k]
                    for k in (("-name", "-iname"), ("-path", "-ipath", "-wholename")))
    paths = [posixpath.join(r, p) for r in roots for p in paths] + paths
    hits = [posixpath.join(p, n) for p in paths for n in names] or paths or \
        [posixpath.join(r, n) for r in roots for n in names] or roots
    sh.f.reads.extend((p, sh.cwd) for p in hits)
    for j, a in enumerate(args):
        if a == "-delete" or (a in ("-exec", "-execdir") and args[j + 1:j + 2] in (["rm"], ["mv"])):
            sh.write(hits, "del")
        elif a in ("-exec", "-execdir", "-ok") and j + 1 < len(args):
            sub = args[j + 1:]
            sub = sub[:next((k for k, x in enumerate(sub) if x in (";", "+", "\\;")), len(sub))]
            for h in hits:
                read_command(sh, [h if x == "{}" else x for x in sub], [], None, None)


def _net(sh, name, args):
    f, j = sh.f, 0
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
                f.reads.append((v.split("@", 1)[1].split(";")[0], sh.cwd))
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


def _storage(sh, name, args):
    """Dataset hubs, notebooks and buckets reached through their CLIs become URL targets."""
    f, pos = sh.f, [a for a in args if not a.startswith("-")]
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

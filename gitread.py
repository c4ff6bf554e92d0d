"""The guard's reader of one git command (cmdread.py meets it in a shell line): what it does to the work tree and
beyond, into the Facts of that shell - history digging (other revisions, the reflog, the upstream: answer lookup),
files it deletes or moves, diffs it applies, credential helpers, stashes, the hosts it reaches, and reverts: a
command that throws away uncommitted or untracked changes (clean -f, stash, reset --hard, checkout/restore of paths,
switch -f), kept with the paths it covers so that a rule can judge it against what an earlier `git status` showed.

Left out: aliases and config that change what a subcommand does, hooks (run later: guard.py's session memory),
plumbing that rewrites the index (update-index, read-tree), and what a revision holds.
"""
import re

REV = re.compile(r"\.\.|[~^]|@\{|^[0-9a-f]{7,40}$|^(?:origin|upstream|refs)/|^(?:main|master|develop|trunk|"
                 r"FETCH_HEAD|ORIG_HEAD|MERGE_HEAD|stash)$")
DIGGING = ("reflog", "fsck", "cat-file", "rev-list", "format-patch", "bundle", "fast-export", "cherry-pick", "merge",
           "rebase", "fetch", "pull", "ls-remote", "unpack-objects")
REMOTE = ("clone", "fetch", "pull", "push", "ls-remote", "remote", "submodule")


def read_git(sh, args, stdin):
    """Facts of `git ARGS` into sh.f (sh: a shellread shell: its write, diff_paths, remotes, cwd)."""
    f, i = sh.f, 0
    while i < len(args) and args[i].startswith("-"):           # -C dir, -c k=v, --no-pager ...
        i += 2 if args[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else 1
    if i >= len(args):
        return
    sub, rest = args[i], args[i + 1:]
    cut = rest.index("--") if "--" in rest else len(rest)
    opts = [a for a in rest[:cut] if a.startswith("-")]
    pos = [a for a in rest[:cut] if not a.startswith("-")]
    revs = [a for a in pos if a != "HEAD" and REV.search(a)]
    dig = False                                     # history digging, other revisions, the upstream
    if sub in ("log", "whatchanged", "shortlog"):
        dig = bool(revs) or any(o in ("-p", "-u", "--patch", "--all", "--branches", "--remotes", "--reflog",
                                      "--full-diff", "--walk-reflogs", "-g") or
                                o.startswith(("-S", "-G", "-L", "--pickaxe", "--diff-filter")) for o in opts)
    elif sub in ("show", "ls-tree"):
        dig = any(a != "HEAD" for a in pos)
    elif sub in ("diff", "grep", "reset", "restore", "checkout", "difftool", "blame"):
        dig = bool(revs) or (sub == "restore" and any(o.startswith(("--source", "-s")) and
                                                      o not in ("-s", "--source=HEAD") for o in opts))
    elif sub in DIGGING:
        dig = True
    elif sub == "switch":
        dig = not set(opts) & {"-c", "-C", "--create", "--orphan"}
    elif sub in ("remote", "submodule"):
        dig = rest[:1] == ["update"] if sub == "remote" else "--remote" in rest
    elif sub == "stash":                            # someone else's stash may hold the fix
        f.hits.add("git-stash" if rest[:1] and rest[0] in ("list", "show", "apply", "pop", "branch") else
                   "stash-push" if not rest or rest[0] in ("push", "save", "-u", "-m") else "")
    elif sub == "rm" and "--cached" not in rest:
        sh.write([a for a in rest if not a.startswith("-")], "del")
    elif sub == "mv" and len(pos) > 1:
        sh.write(pos[:-1], "del")
        sh.write(pos[-1:], "new")
    elif sub in ("apply", "am"):
        sh.diff_paths(stdin or "")
        f.applies.extend((a, sh.cwd) for a in pos)
    elif sub in ("credential", "credential-store") or (sub == "config" and any("credential" in a for a in rest)):
        f.hits.add("credentials")
    if dig:
        f.hits.add("answer-lookup")
    if sub in REMOTE:
        sh.remotes(rest)
    _revert(f, sh.cwd, sub, rest, opts, [a for a in rest if not a.startswith("-")])


def _revert(f, cwd, sub, rest, opts, pos):
    """A command that discards the work tree's changes: (its paths, [] for the whole tree; cwd) into f.reverts."""
    paths = pos[1:] if sub == "stash" else pos
    if sub == "clean" and any("f" in o.lstrip("-")[:8] for o in opts) or sub == "reset" and "--hard" in opts \
            or sub == "stash" and (not pos or pos[0] in ("push", "save")) \
            or sub == "switch" and set(opts) & {"-f", "--force", "--discard-changes"} \
            or sub == "checkout" and ("-f" in opts or "--" in rest or any("/" in a or a == "." for a in pos)) \
            or sub == "restore" and not (set(opts) & {"--staged", "-S"} and not set(opts) & {"--worktree", "-W"}):
        f.reverts.append((paths if sub in ("clean", "checkout", "restore") else [], cwd))

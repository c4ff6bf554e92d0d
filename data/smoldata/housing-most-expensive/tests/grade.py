"""Answer grader (SmolDataEnvs-style ladder), copied into the tests/ of every answer-file task.

usage: python3 grade.py EXPECTED_JSON ANSWER_FILE LOGS_DIR  -> writes LOGS_DIR/reward.json {"reward": 1|0}

EXPECTED_JSON: {"answer": gold, "kind": "number"|"percent"|"label"|"yesno"|"list",
                "tolerance": {"abs": a, "rel": r}, "ordered": bool}
The ladder, first match wins:
  1. exact   - after normalising case, whitespace, surrounding quotes/backticks and a final period
               (yes/no also accept y/n/true/false);
  2. numeric - the answer's single number (thousands separators, currency signs, a % sign and
               surrounding words allowed) within max(abs, rel * |gold|) of the gold value; for
               "percent", a fraction in [0, 1] is also read as that many hundredths;
  3. list    - items split on commas, semicolons or new lines, each compared by steps 1-2, in order
               when "ordered", else as a multiset.
A missing or empty answer file scores 0.
"""
import json
import os
import re
import sys

NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
YES, NO = {"yes", "y", "true"}, {"no", "n", "false"}


def norm(s):
    s, prev = " ".join(str(s).split()), None
    while s != prev:                              # quotes, emphasis, a final period: in any nesting
        prev, s = s, s.strip("\"'`* ").rstrip(".")
    return s.casefold()


def parse_number(s):
    """The one number in s (or None), and whether it carried a % sign."""
    found = NUMBER.findall(s.replace("\u2212", "-"))
    if len(found) != 1:
        return None, False
    return float(found[0].replace(",", "")), "%" in s


def close(x, gold, tol):
    return abs(x - gold) <= max(tol.get("abs", 0.0), tol.get("rel", 1e-9) * abs(gold)) + 1e-12


def same(ans, gold, kind, tol):
    """Steps 1 and 2 for one value."""
    a, g = norm(ans), norm(gold)
    if a == g:
        return "exact"
    if kind == "yesno" and (a in YES and g in YES or a in NO and g in NO):
        return "exact"
    if isinstance(gold, (int, float)) or kind in ("number", "percent"):
        x, _ = parse_number(a)
        try:
            gv = float(gold)
        except ValueError:
            return None
        if x is not None and (close(x, gv, tol) or kind == "percent" and 0 <= x <= 1 and close(100 * x, gv, tol)):
            return "numeric"
    return None


def grade(text, exp):
    """(reward, step) for an answer text against an expected.json dict."""
    gold, kind, tol = exp["answer"], exp.get("kind", "label"), exp.get("tolerance", {})
    if not text.strip():
        return 0.0, "empty answer"
    if kind != "list":
        step = same(text, gold, kind, tol)
        return (1.0, step) if step else (0.0, "no match")
    if norm(text) == norm(", ".join(map(str, gold))):
        return 1.0, "exact"
    items = [i for i in re.split(r"[,;\n]", text) if norm(i)]
    if len(items) != len(gold):
        return 0.0, f"{len(items)} items, expected {len(gold)}"
    if exp.get("ordered"):
        ok = all(same(a, g, "label", tol) for a, g in zip(items, gold))
    else:
        left = list(gold)
        for a in items:
            hit = next((g for g in left if same(a, g, "label", tol)), None)
            if hit is None:
                break
            left.remove(hit)
        ok = not left
    return (1.0, "list") if ok else (0.0, "list differs")


def main(expected_json, answer_file, logs_dir):
    with open(expected_json) as f:
        exp = json.load(f)
    text = ""
    if os.path.isfile(answer_file):
        with open(answer_file, errors="replace") as f:
            text = f.read()
    reward, step = grade(text, exp)
    with open(os.path.join(logs_dir, "reward.json"), "w") as f:
        f.write(json.dumps({"reward": reward}) + "\n")
    print(f"answer {text.strip()[:200]!r}: {step} -> {reward}")


if __name__ == "__main__":
    main(*sys.argv[1:4])

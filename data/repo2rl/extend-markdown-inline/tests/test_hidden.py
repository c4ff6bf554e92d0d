from md import render


def test_bold():
    assert render("a **b** c") == "<p>a <strong>b</strong> c</p>"


def test_italic():
    assert render("an *odd* one") == "<p>an <em>odd</em> one</p>"


def test_code():
    assert render("run `ls -l`") == "<p>run <code>ls -l</code></p>"


def test_code_is_literal():
    assert render("`**not bold**`") == "<p><code>**not bold**</code></p>"


def test_in_headers_and_escaped():
    assert render("# *Tips* & **tricks**") == "<h1><em>Tips</em> &amp; <strong>tricks</strong></h1>"

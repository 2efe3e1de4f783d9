"""The playground at /ui, driven in Debian's Chromium (Playwright) against a real
``pgbraid serve``: the Godot docs searched, the trace, fusion and plan read, a zero-hit
explanation, a document and its versions, markup in a document shown inert, a revoked
key refused with a clear message, and the Content-Security-Policy in force.

The browser is /usr/bin/chromium (``./run setup`` installs Debian's package when it can);
without it these tests skip. Playwright never downloads a browser here. The screenshot
lands in the test's tmp folder; with ``PGBRAID_UI_SCREENSHOT=PATH`` it is copied there too
(docs/ui.png was made so).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

import httpx
import pytest

import pgbraid

from .serving import served  # noqa: F401  (fixture)
from .test_fulltext import PLAYER_PAGE, godot  # noqa: F401  (module fixture)

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
LAPTOP = {"width": 1366, "height": 860}
SCRIPT_TITLE = "<script>window.__pwned = 1</script>Rotation notes"
IMG_TEXT = ('Rotate the signing keys monthly. <img src=x onerror="window.__pwned = 2"> '
            "Revoke a leaked key at once. <script>window.__pwned = 3</script>")


def test_the_page_and_its_files_carry_a_strict_content_security_policy(served):  # noqa: F811
    with httpx.Client(base_url=served.url) as http:
        for path, media in (("/ui", "text/html"), ("/ui/", "text/html"),
                            ("/ui/app.js", "text/javascript"),
                            ("/ui/render.js", "text/javascript"),
                            ("/ui/style.css", "text/css")):
            answer = http.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["content-type"].startswith(media)
            csp = answer.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "script-src 'self'" in csp
            assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
            assert answer.headers["x-content-type-options"] == "nosniff"
        missing = http.get("/ui/..%2Fapp.py")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        assert "/ui" not in str(http.get("/openapi.json").json()["paths"])


# -- the browser ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (the test extra)")
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium: `./run setup` installs Debian's chromium with "
                    "apt-get when run as root; Playwright's own browser builds are not used")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture()
def page(browser, served):  # noqa: F811
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    page.on("pageerror", lambda exc: page.console_errors.append(str(exc)))
    page.goto(served.url + "/ui")
    yield page
    context.close()


@pytest.fixture(scope="module")
def local(data_dir, server):
    with pgbraid.connect(data_dir=data_dir) as client:
        yield client


@pytest.fixture()
def key(local) -> str:
    return local.create_key(pipeline="*", permissions="read,execute")["key"]


@pytest.fixture(scope="module")
def marked_up(local) -> str:
    name = f"ui-{uuid.uuid4().hex[:8]}"
    local.create_pipeline(name, embedder="none")
    report = local.ingest(name, [
        {"id": "notes/<img src=x onerror=alert(1)>", "title": SCRIPT_TITLE, "text": IMG_TEXT,
         "metadata": {"owner": "<b onmouseover=alert(1)>ops</b>"}},
        {"id": "other", "title": "Other", "text": "Backups run nightly."}])
    assert report.added == 2
    again = local.ingest(name, [{"id": "other", "title": "Other",
                                 "text": "Backups run nightly and are restored weekly."}])
    assert again.updated == 1
    return name


def sign_in(page, key: str, pipeline: str) -> None:
    from playwright.sync_api import expect

    page.fill("#key", key)
    page.press("#key", "Enter")
    expect(page.locator(f"#pipeline option[value='{pipeline}']")).to_have_count(1)
    page.select_option("#pipeline", pipeline)


def search(page, query: str, type_: str = "auto") -> None:
    from playwright.sync_api import expect

    page.select_option("#type", type_)
    page.fill("#query", query)
    page.press("#query", "Enter")  # Enter searches
    # (wait_for_function would evaluate a string: the page's policy forbids eval)
    expect(page.locator("#summary")).to_have_text(re.compile(r"^\d+ hits"))


def test_search_godot_read_the_trace_and_a_zero_hit_explanation(page, key, godot,  # noqa: F811
                                                                 tmp_path):
    from playwright.sync_api import expect

    sign_in(page, key, godot)
    assert key not in page.url
    assert page.evaluate("sessionStorage.getItem('pgbraid.key')") == key
    search(page, "AnimatedSprite2D play animation")
    hits = page.locator("#results .hit")
    top3 = [hits.nth(i).get_attribute("data-document") for i in range(3)]
    assert PLAYER_PAGE in top3
    assert page.locator("#results mark").count() > 0  # highlights, marks as elements

    page.click("#tabs [data-tab=trace]")  # open the trace
    legs = page.locator("#trace .leg")
    names = [legs.nth(i).get_attribute("data-retriever") for i in range(legs.count())]
    assert names == ["bm25", "similarity"]  # auto's plan for keywords
    bm25 = page.locator("#trace .leg[data-retriever=bm25]")
    expect(bm25.locator(".chip")).to_have_text("ran")
    expect(bm25.locator(".nums")).to_contain_text(" hits · ")
    assert bm25.locator(".bar").evaluate("bar => bar.getBoundingClientRect().width") > 0
    similarity = page.locator("#trace .leg[data-retriever=similarity]")  # no embedder
    expect(similarity.locator(".chip")).to_have_text("skipped")
    expect(similarity.locator(".reason")).not_to_be_empty()

    shot = tmp_path / "ui.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 10_000
    if os.environ.get("PGBRAID_UI_SCREENSHOT"):
        shutil.copy(shot, os.environ["PGBRAID_UI_SCREENSHOT"])

    page.click("#tabs [data-tab=fusion]")
    rows = page.locator("#fusion table.fusion tbody tr")
    assert rows.count() == hits.count()
    header = page.locator("#fusion table.fusion thead th").all_text_contents()
    assert header == ["#", "hit", "fused", "bm25"]  # the legs that ran
    assert page.locator("#fusion tbody td").filter(has_text="#1").count() >= 1

    page.click("#tabs [data-tab=plan]")
    assert page.locator("#plan .reasons li").count() >= 1

    hits.filter(has=page.locator(f"code:text-is('{PLAYER_PAGE}')")).first.locator(
        "button.title").click()
    expect(page.locator("#document h2")).to_have_text("Coding the player")
    expect(page.locator("#document .versions li")).to_have_count(1)
    expect(page.locator("#document .doc-text")).to_contain_text("func _process(delta):")
    page.screenshot(path=str(tmp_path / "document.png"))

    search(page, "screen_size quaternion", "fulltext")  # both words exist, never together
    zero = page.locator("#zero-hits")
    expect(zero).to_be_visible()
    expect(zero).to_contain_text("Over-restricting")
    tokens = zero.locator("table.tokens tbody td:first-child").all_text_contents()
    assert "quaternion" in tokens and len(tokens) >= 2  # each token, with its fragments
    page.screenshot(path=str(tmp_path / "zero-hits.png"))
    assert page.console_errors == []


def test_markup_in_a_document_renders_as_text(page, key, marked_up):
    from playwright.sync_api import expect

    sign_in(page, key, marked_up)
    page.uncheck("#highlight")  # the fragment's text as it is, not passages of it
    search(page, "rotate signing keys", "fulltext")
    hit = page.locator("#results .hit").first
    expect(hit.locator("button.title")).to_have_text(SCRIPT_TITLE)
    expect(hit).to_contain_text('<img src=x onerror="window.__pwned = 2">')
    hit.locator("button.title").click()
    expect(page.locator("#document .doc-text")).to_have_text(IMG_TEXT)
    expect(page.locator("#document")).to_contain_text("notes/<img src=x onerror=alert(1)>")
    assert page.locator("#results img, #results script, #document img, #document script,"
                        " b").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert page.console_errors == []


def test_a_document_shows_each_of_its_versions(page, key, marked_up):
    from playwright.sync_api import expect

    sign_in(page, key, marked_up)
    search(page, "backups restored", "bm25")
    page.locator("#results .hit[data-document=other] button.title").click()
    versions = page.locator("#document .versions button")
    expect(versions).to_have_count(2)
    expect(page.locator("#document .doc-text")).to_have_text(
        "Backups run nightly and are restored weekly.")
    expect(versions.nth(1)).to_have_attribute("aria-pressed", "true")
    versions.nth(0).click()  # the first version, expired but readable
    expect(page.locator("#document .doc-text")).to_have_text("Backups run nightly.")
    expect(page.locator("#document .versions button").nth(0)).to_have_attribute(
        "aria-pressed", "true")
    assert page.console_errors == []


def test_a_revoked_key_gets_a_clear_message(page, local, marked_up):
    from playwright.sync_api import expect

    created = local.create_key(pipeline="*", permissions="read,execute")
    sign_in(page, created["key"], marked_up)
    search(page, "backups", "bm25")
    local.revoke_key(created["id"])
    page.fill("#query", "nightly")
    page.press("#query", "Enter")
    message = page.locator("#message")
    expect(message).to_contain_text("The server refused the API key")
    expect(message).to_contain_text("revoked")
    assert page.evaluate("sessionStorage.getItem('pgbraid.key')") is None


def test_the_policy_blocks_inline_script_in_the_page(page):
    page.evaluate("""() => {
        const script = document.createElement('script');
        script.textContent = 'window.__inline = 1';
        document.body.append(script);
    }""")
    assert page.evaluate("window.__inline") is None
    assert any("Content Security Policy" in text for text in page.console_errors)

"""One headless Debian chromium per test session, driven by Playwright (never downloads a browser)."""

from __future__ import annotations

import os
import shutil

import pytest

from devtools.browser import ARGS, CHROMIUM
from devtools.environ import restore_env


@pytest.fixture(scope="session")
def chromium():
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup --with-browser")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
    # between page actions are plain synchronous ones. conftest runs browser tests last, and
    # the variable is removed again so no later subprocess inherits it.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        restore_env("DJANGO_ALLOW_ASYNC_UNSAFE", previous)


@pytest.fixture
def viewer_page(stack, chromium):
    """A browser page on the real ASGI server, logged in as a viewer; ``page.base`` is the server's URL."""
    from tests.support.dashboard_rows import PASSWORD, make_user

    make_user("viewer", operator=False)
    base = stack.start_web()
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, base, "viewer", PASSWORD)
    page.base = base
    try:
        yield page
    finally:
        context.close()


def log_in(page, base_url: str, username: str, password: str) -> None:
    page.goto(base_url + "/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(base_url + "/")


def logged_in_page(chromium, base_url: str, username: str, password: str, height: int = 1000):
    """A page in a fresh browser context, logged in: (context, page), the context for the caller to close."""
    context = chromium.new_context(viewport={"width": 1400, "height": height})
    try:
        page = context.new_page()
        log_in(page, base_url, username, password)
    except BaseException:
        context.close()
        raise
    return context, page

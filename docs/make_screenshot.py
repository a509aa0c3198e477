"""The run viewer's screenshot on the docs site (docs/assets/viewer.png), taken in headless Chromium.

    agentr1 view RUN_DIR && python docs/make_screenshot.py RUN_DIR/view.html docs/assets/viewer.png

Opens the page with two steps side by side and saves the episodes section.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service


def main() -> None:
    page, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    options = Options()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1500,1100"):
        options.add_argument(arg)
    browser = webdriver.Chrome(
        service=Service(shutil.which("chromedriver") or "chromedriver"), options=options
    )
    try:
        browser.get(page.as_uri() + "#compare")
        section = browser.find_element("css selector", ".controls")
        browser.execute_script("arguments[0].scrollIntoView()", section)
        browser.save_screenshot(str(out))
    finally:
        browser.quit()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

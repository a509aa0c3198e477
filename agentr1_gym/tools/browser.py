"""One headless Chromium as a managed resource: started lazily, reused, bounded by a deadline on every call, and
never left behind.

* **Lifetime.** :class:`Browser` starts ChromeDriver (which starts Chromium) through a small keeper process
  (``_browser_keeper.py``): the keeper holds the driver in a process group of its own, is the child subreaper of
  every process the browser starts, and kills them all and removes the browser's profile when its standard input
  ends. That pipe ends when :meth:`Browser.close` closes it or when the process holding the browser dies in any
  way (``SIGKILL`` included), so a killed run leaves no browser behind.
* **Deadlines.** Every call (page load, script, key presses) has ``call_timeout_s``: the driver's own
  script and page-load timeouts, and the HTTP exchange with the driver bounded a little above them. A call that
  misses it, or a browser that died, raises :class:`~agentr1_gym.errors.ToolInfrastructureError` (the
  infrastructure failed, not the model) and the browser is torn down; the next call starts a fresh one.
* **No network.** The browser opens local files only: every host name resolves to nothing, every http(s)
  request (loopback included) goes to a closed proxy port, downloads are refused, and no URL comes from the agent
  (envs open their own pages; :meth:`Browser.open` takes ``file://`` URLs only). Alerts are dismissed.

Chromium and ChromeDriver come from the system (``apt-get install chromium chromium-driver`` on Debian/Ubuntu) or
from ``AGENTR1_CHROMIUM`` and ``AGENTR1_CHROMEDRIVER``; Selenium (``pip install "agentr1-gym[browser]"``) talks
to the driver.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from agentr1_gym.errors import (
    ConfigError,
    MissingDependencyError,
    MissingProgramError,
    ToolInfrastructureError,
)

__all__ = ["Browser", "find_browser"]

_KEEPER = Path(__file__).with_name("_browser_keeper.py")
INSTALL_HINT = (
    "install them with `apt-get install chromium chromium-driver` (Debian/Ubuntu), or point AGENTR1_CHROMIUM and "
    "AGENTR1_CHROMEDRIVER at a Chromium binary and the ChromeDriver of the same version"
)
#: the command-line switches every browser starts with (headless, no network, no background services)
CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",  # Chromium's own sandbox needs user namespaces, which containers (and root) often lack
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=http://127.0.0.1:9",  # a closed port: no http(s) request leaves, loopback included
    "--proxy-bypass-list=<-loopback>",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--mute-audio",
    "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication",
)


def find_browser() -> tuple[str, str]:
    """The Chromium binary and the ChromeDriver to use, or a one-line :class:`MissingProgramError` saying how to
    install them."""
    chromium = os.environ.get("AGENTR1_CHROMIUM") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
    )
    driver = os.environ.get("AGENTR1_CHROMEDRIVER") or shutil.which("chromedriver")
    missing = [name for name, path in (("Chromium", chromium), ("ChromeDriver", driver)) if not path]
    if missing:
        raise MissingProgramError(f"a browser world needs headless {' and '.join(missing)}: {INSTALL_HINT}")
    for name, path in (("AGENTR1_CHROMIUM", chromium), ("AGENTR1_CHROMEDRIVER", driver)):
        if not os.access(str(path), os.X_OK):
            raise MissingProgramError(f"{name}={path} is not an executable file: {INSTALL_HINT}")
    # Debian's /usr/bin/chromium is a shell wrapper; the driver needs the binary it runs
    real = Path(str(chromium)).resolve()
    wrapped = Path("/usr/lib/chromium/chromium")
    if real.suffix == "" and real.name == "chromium" and real.parent.name == "bin" and wrapped.is_file():
        real = wrapped
    return str(real), str(driver)


def _selenium() -> Any:
    try:
        import selenium.webdriver
    except ImportError:
        raise MissingDependencyError("selenium", "browser", "a browser world") from None
    return selenium.webdriver


class _Keeper:
    """The keeper process and the profile directory of one browser (closed by a finalizer too)."""

    def __init__(self, driver: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="agentr1-browser-")
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(_KEEPER), driver, self.profile],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.finalizer = weakref.finalize(self, _stop_keeper, self.process, self.profile)

    def port(self, timeout_s: float) -> int:
        """Wait for the keeper's ``ready PORT`` line."""
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        text = (line[0] if line else b"").decode("utf-8", "replace").strip()
        if not text.startswith("ready "):
            self.finalizer()
            why = text.removeprefix("failed ") or f"no answer within {timeout_s:.0f} s"
            raise ToolInfrastructureError(f"ChromeDriver did not start: {why}")
        return int(text.split()[1])


def _stop_keeper(process: subprocess.Popen, profile: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        process.stdin.close()  # the keeper kills the driver, the browser and every process they made
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for stream in (process.stdout,):
        with contextlib.suppress(OSError, ValueError):
            stream.close()
    shutil.rmtree(profile, ignore_errors=True)


class Browser:
    """One headless Chromium, started on first use and reused until :meth:`close`.

    Args:
        call_timeout_s: the deadline of every call (page load, script, keys).
        window_size: the browser window in CSS pixels.
        start_timeout_s: the deadline for starting the driver and the browser.
    """

    def __init__(
        self,
        *,
        call_timeout_s: float = 15.0,
        window_size: tuple[int, int] = (500, 400),
        start_timeout_s: float = 60.0,
    ) -> None:
        if not call_timeout_s > 0 or not start_timeout_s > 0:
            raise ConfigError(f"browser deadlines must be > 0 s, got {call_timeout_s!r}, {start_timeout_s!r}")
        self.call_timeout_s = float(call_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.window_size = window_size
        self._driver: Any = None
        self._keeper: _Keeper | None = None
        #: how many browsers this object started (a restart after a failure counts)
        self.starts = 0

    @property
    def running(self) -> bool:
        return self._driver is not None

    @property
    def pid(self) -> int | None:
        """The keeper's process id (every browser process descends from it), or None."""
        return self._keeper.process.pid if self._keeper is not None else None

    def driver(self) -> Any:
        """The Selenium driver, starting the browser if it is not running."""
        if self._driver is None:
            self._start()
        return self._driver

    def _start(self) -> None:
        webdriver = _selenium()
        from selenium.webdriver.remote.client_config import ClientConfig

        chromium, driver = find_browser()
        self._keeper = _Keeper(driver)
        try:
            port = self._keeper.port(self.start_timeout_s)
            options = webdriver.ChromeOptions()
            options.binary_location = chromium
            for arg in CHROMIUM_ARGS:
                options.add_argument(arg)
            options.add_argument(f"--user-data-dir={self._keeper.profile}/profile")
            options.add_argument(f"--window-size={self.window_size[0]},{self.window_size[1]}")
            options.add_experimental_option(
                "prefs", {"download_restrictions": 3, "download.prompt_for_download": False}
            )
            options.unhandled_prompt_behavior = "dismiss"
            url = f"http://127.0.0.1:{port}"
            config = ClientConfig(url, keep_alive=True, timeout=int(self.start_timeout_s))
            self._driver = webdriver.Remote(command_executor=url, options=options, client_config=config)
            self._driver.command_executor._client_config.timeout = int(self.call_timeout_s) + 5
            self._driver.set_script_timeout(self.call_timeout_s)
            self._driver.set_page_load_timeout(self.call_timeout_s)
        except ToolInfrastructureError:
            self.close()
            raise
        except Exception as exc:  # the driver refused the session (a version mismatch, a broken binary, ...)
            self.close()
            raise ToolInfrastructureError(
                f"Chromium did not start ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}); "
                f"{INSTALL_HINT}"
            ) from None
        self.starts += 1

    def call(self, what: str, fn: Any, *args: Any) -> Any:
        """``fn(driver, *args)`` under the deadline. A missed deadline or a dead browser tears the browser down and
        raises :class:`ToolInfrastructureError`; an error the page's own script raised does too, but keeps the
        browser."""
        from selenium.common.exceptions import JavascriptException

        driver = self.driver()
        started = time.monotonic()
        try:
            return fn(driver, *args)
        except JavascriptException as exc:
            raise ToolInfrastructureError(f"browser: {what} failed in the page: {_first_line(exc)}") from None
        except ToolInfrastructureError:
            raise
        except Exception as exc:  # WebDriverException, a timed-out or refused connection to the driver, ...
            took = time.monotonic() - started
            self.close()
            late = (
                f" after {took:.1f} s (deadline {self.call_timeout_s:.0f} s)"
                if took >= self.call_timeout_s
                else ""
            )
            raise ToolInfrastructureError(
                f"browser: {what} failed{late} ({type(exc).__name__}: {_first_line(exc)}); the browser was "
                "closed and the next call starts a new one"
            ) from None

    def open(self, url: str) -> None:
        """Load a local page (``file://`` URLs only: no page here comes from the network)."""
        if not url.startswith("file:///"):
            raise ConfigError(f"Browser.open takes local file:// URLs only, got {url[:80]!r}")
        self.call(f"loading {url.rsplit('/', 1)[-1]}", lambda d: d.get(url))

    def script(self, source: str, *args: Any) -> Any:
        """Run JavaScript in the page and return its result."""
        return self.call("a script", lambda d: d.execute_script(source, *args))

    def keys(self, keys: Any) -> None:
        """Send key presses to the focused element (real key events: the page's handlers see them)."""
        from selenium.webdriver.common.action_chains import ActionChains

        self.call("typing", lambda d: ActionChains(d, duration=0).send_keys(*keys).perform())

    def screenshot(self, element_id: str) -> bytes:
        """A PNG of the element with this id, as the page draws it now (for people reading an episode)."""
        from selenium.webdriver.common.by import By

        return self.call("a screenshot", lambda d: d.find_element(By.ID, element_id).screenshot_as_png)

    def close(self) -> None:
        """Quit the browser and its driver; every process they started goes with the keeper."""
        driver, keeper = self._driver, self._keeper
        self._driver = self._keeper = None
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.command_executor._client_config.timeout = 5
                driver.quit()
        if keeper is not None:
            keeper.finalizer()

    def __getstate__(self) -> dict[str, Any]:  # a pickled browser starts again where it is used
        return {"call_timeout_s": self.call_timeout_s, "window_size": self.window_size,
                "start_timeout_s": self.start_timeout_s}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "msg", None) or str(exc)
    return (str(text).strip().splitlines() or [type(exc).__name__])[0][:300]

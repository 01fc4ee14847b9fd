"""A real JupyterLab leaves the committed notebooks alone (issue 71, part 2).

The Lab of ``make lab`` (its server config and settings overrides, ``scripts/jupyter/``) is
started headless on a copy of the notebooks and driven in headless Chromium (tests/lab_browser.py):
every notebook is opened at once, their kernels started side by side, and then for each

- it is not marked modified (JupyterLab copies its kernel's ``language_info`` into the notebook
  when the kernel starts: the committed metadata is already that);
- saved (as Ctrl+S does), the file is the committed one, byte for byte;
- autosave is off and no "official Jupyter news" prompt is shown.

Chromium is required, as for tests/test_site.py (``make browser`` installs it).
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from lab_browser import Browser, lab_server

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

#: Open every notebook of ``paths`` at once (their kernels start side by side), wait for every kernel
#: to be idle and the models to settle, and tell of each whether it is marked modified;
#: ``window.labtest[path]`` keeps each widget for :data:`SAVE`.
OPEN = """(async () => {
  const app = window.jupyterapp; await app.started; await app.restored;
  const paths = %(paths)s, pause = ms => new Promise(r => setTimeout(r, ms));
  const ws = await Promise.all(paths.map(path => app.commands.execute('docmanager:open', {path, factory: 'Notebook'})));
  await Promise.all(ws.map(async w => { await w.context.ready; await w.sessionContext.ready; }));
  const idle = w => w.sessionContext.session && w.sessionContext.session.kernel
                    && w.sessionContext.session.kernel.status === 'idle';
  const t0 = Date.now();
  while (!ws.every(idle) && Date.now() - t0 < 300000) await pause(200);
  await pause(3000);  // JupyterLab updates the metadata once the kernel is ready
  window.labtest = window.labtest || {};
  const out = {};
  paths.forEach((path, i) => { const w = ws[i]; window.labtest[path] = w;
    out[path] = {idle: Boolean(idle(w)), dirty: w.context.model.dirty,
                 language_info: w.context.model.getMetadata('language_info')}; });
  return out;
})()"""
SAVE = """(async () => { const w = window.labtest[%(path)s]; await w.context.save();
  const dirty = w.context.model.dirty; await w.sessionContext.shutdown(); w.dispose(); return dirty; })()"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """``(browser, notebooks folder, base URL, token, what OPEN found of each notebook)``: the Lab of
    ``make lab`` on a copy of notebooks/, loaded, every notebook opened and its kernel started."""
    tmp = tmp_path_factory.mktemp("lab")
    notebooks = tmp / "notebooks"
    shutil.copytree(ROOT / "notebooks", notebooks)
    with lab_server(notebooks, tmp) as (base, token):
        browser = Browser(tmp)
        try:
            browser.goto(f"{base}/lab?token={token}")
            loaded = browser.evaluate("new Promise(r => { const t0 = Date.now(); const f = () => window.jupyterapp"
                                      " ? window.jupyterapp.restored.then(() => r(true))"
                                      " : (Date.now() - t0 > 240000 ? r(false) : setTimeout(f, 250)); f(); })")
            assert loaded, "JupyterLab did not load in Chromium within 4 minutes"
            opened = browser.evaluate(OPEN % {"paths": json.dumps(NOTEBOOKS)})
            yield browser, notebooks, base, token, opened
        finally:
            browser.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_lab_opens_a_committed_notebook_unmodified_and_saves_it_byte_identical(lab, name):
    browser, notebooks, _, _, every = lab
    committed = (ROOT / "notebooks" / name).read_bytes()
    opened = every[name]
    assert opened["idle"], f"{name}: its kernel did not start"
    assert not opened["dirty"], (
        f"{name} is marked modified on opening: its language_info {json.loads(committed)['metadata']['language_info']}"
        f", the kernel's {opened['language_info']} (run scripts/clean_notebooks.py)")
    assert browser.evaluate(SAVE % {"path": json.dumps(name)}) is False
    assert (notebooks / name).read_bytes() == committed, f"{name}: saved in JupyterLab, it differs from the committed one"


@pytest.mark.slow
def test_lab_does_not_autosave_and_asks_nothing_about_news(lab):
    browser, _, base, token, _ = lab
    settings = browser.evaluate(f"""(async () => {{
      const get = async id => (await (await fetch('{base}/lab/api/settings/' + id + '?token={token}')).json());
      const doc = await get('@jupyterlab/docmanager-extension:plugin');
      const note = await get('@jupyterlab/apputils-extension:notification');
      return {{autosave: doc.schema.properties.autosave.default,
               fetchNews: note.schema.properties.fetchNews.default,
               checkForUpdates: note.schema.properties.checkForUpdates.default}};
    }})()""")
    assert settings == {"autosave": False, "fetchNews": "false", "checkForUpdates": False}
    time.sleep(2)
    text = browser.evaluate("document.body.innerText")
    assert "Jupyter news" not in text, "JupyterLab asks about official Jupyter news"

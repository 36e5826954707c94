"""The page at `/` in a real headless Chromium (Debian's chromium + chromedriver, driven by Selenium):
upload examples/resnet18.onnx, pick three devices, see the ranked table, the kernel chart and the warnings."""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from lilou.errors import LilouInputError
# the session's server and predictor fixtures from test_serve: one uvicorn process for both files
from tests.test_serve import RESNET18, models_root, predictor, server, upload_tmp  # noqa: F401

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--window-size=1280,2000")
DEVICES = ["a10g", "t4", "a100-sxm4-80gb/1g.10gb"]

pytestmark = pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                                reason="no browser: install Debian's chromium and chromium-driver "
                                       "(apt-get install chromium chromium-driver; .ci/run does)")


def js_ms(x: float) -> str:
    """The page's number format (app.js ``ms``): JavaScript's toFixed rounds the exact binary value, ties up."""
    digits = 1 if x >= 100 else 3 if x >= 1 else 4
    return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def js_number(x: float) -> str:
    """The page's LLM number format (app.js: ``Number(x.toPrecision(4))`` shown as a string)."""
    value = float(f"{x:.4g}")
    return str(int(value)) if value.is_integer() else repr(value)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="lilou-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_upload_rank_and_breakdown(browser, server, predictor):  # noqa: F811 - the imported fixtures
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    ranking = predictor.rank(RESNET18, gpus=DEVICES)
    fastest = ranking[0]
    prediction = predictor.predict(RESNET18, gpu=fastest.gpu, mig=fastest.mig)

    browser.get(server + "/")
    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#devices option")) > 100)
    browser.find_element(By.ID, "file").send_keys(str(RESNET18))
    browser.find_element(By.ID, "all-devices").click()   # untick "every GPU and MIG slice"
    select = Select(browser.find_element(By.ID, "devices"))
    for value in DEVICES:
        select.select_by_value(value)
    browser.find_element(By.ID, "rank-button").click()

    wait.until(lambda d: d.find_element(By.ID, "ranking").is_displayed()
               and len(d.find_elements(By.CSS_SELECTOR, "#ranking tbody tr")) == len(DEVICES))
    rows = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, "#ranking tbody tr")]
    assert [(row[1], None if row[2] == "–" else row[2]) for row in rows] == [(e.gpu, e.mig) for e in ranking]
    assert rows[0][-3] == "1.00×"
    intervals = [entry.get("interval_ms") for entry in ranking.to_json()]
    header = browser.find_element(By.CSS_SELECTOR, "#ranking th.interval")
    assert header.is_displayed() == all(intervals)
    if all(intervals):
        assert [row[4] for row in rows] == [f"{js_ms(lo)} – {js_ms(hi)}" for lo, hi in intervals]

    # the breakdown of the fastest device follows, with its warnings
    wait.until(lambda d: d.find_element(By.ID, "breakdown").is_displayed())
    bars = browser.find_elements(By.CSS_SELECTOR, "#chart svg rect.bar")
    assert len(bars) == min(12, len(prediction.kernels))
    longest = sorted(k.latency_ms for k in prediction.kernels)[-1]
    assert float(bars[0].get_attribute("width")) == pytest.approx(420)   # the longest kernel spans the axis
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#chart svg text.value")]
    assert labels[0] == f"{js_ms(longest)} ms"
    title = browser.find_element(By.ID, "breakdown-title").text
    assert f"{len(prediction.kernels)} kernels" in title and fastest.gpu in title
    warnings = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#warnings li")]
    assert any("memory-bound fallback" in w for w in warnings)
    assert browser.find_element(By.ID, "rank-status").text == "Done."
    # bad input comes back as the service's one line: this export has a baked-in batch of 1
    with pytest.raises(LilouInputError) as refused:
        predictor.rank(RESNET18, gpus=DEVICES, batch=8)
    browser.find_element(By.ID, "batch").send_keys("8")
    browser.find_element(By.ID, "rank-button").click()
    expected = "Error: " + str(refused.value).replace(str(RESNET18), "resnet18.onnx")
    wait.until(lambda d: d.find_element(By.ID, "rank-status").text.startswith("Error:"))
    assert browser.find_element(By.ID, "rank-status").text == expected


def test_llm_form_shows_the_steady_state_of_a_vllm_server(browser, server):  # noqa: F811 - the imported fixture
    """The LLM form: a vLLM prediction lists the server's steady state (ITL and tokens/s with ``batch`` requests
    running) beside the static batch's figures, with the numbers the API returns."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from lilou.llm import LLMPredictor

    browser.get(server + "/")
    wait = WebDriverWait(browser, 90)
    # the page fills the model box with the first built-in name once the list has loaded
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#llm-models option")) > 100)
    for field, value in (("llm-model", "meta-llama/Llama-3.1-8B-Instruct"), ("llm-gpu", "a100-80gb"),
                         ("llm-batch", "8")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.find_element(By.ID, "llm-button").click()
    status = browser.find_element(By.ID, "llm-status")
    wait.until(lambda d: status.text == "Done." or status.text.startswith("Error"))
    assert status.text == "Done.", status.text
    terms = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#llm-result dt")]
    values = [v.text for v in browser.find_elements(By.CSS_SELECTOR, "#llm-result dd")]
    shown = dict(zip(terms, values))
    expected = LLMPredictor().predict("meta-llama/Llama-3.1-8B-Instruct", "a100-80gb", batch=8, input_len=512,
                                      output_len=128).to_json()["steady_state"]
    assert shown["ITL, server with 8 running (ms)"].startswith(js_number(expected["itl_ms"]) + " (90 %: ")
    assert shown["tokens/s, server with 8 running"] == js_number(expected["tokens_per_s"])


def _rank_on_the_page(browser, path, fields: dict[str, str]) -> tuple[list[tuple], str]:
    """On the loaded page, upload ``path``, pick DEVICES, fill ``fields`` (element id -> text) and rank: the rows
    shown (gpu, mig, ms) and the status line once the page is done or has failed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#devices option")) > 100)
    browser.find_element(By.ID, "file").send_keys(str(path))
    if browser.find_element(By.ID, "all-devices").is_selected():
        browser.find_element(By.ID, "all-devices").click()
        select = Select(browser.find_element(By.ID, "devices"))
        for value in DEVICES:
            select.select_by_value(value)
    for element, text in fields.items():
        field = browser.find_element(By.ID, element)
        field.clear()
        field.send_keys(text)
    status = browser.find_element(By.ID, "rank-status")
    browser.execute_script("arguments[0].textContent = ''", status)
    browser.find_element(By.ID, "rank-button").click()
    wait.until(lambda d: status.text == "Done." or status.text.startswith("Error:"))
    rows = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, "#ranking tbody tr")]
    return [(row[1], None if row[2] == "–" else row[2], row[3]) for row in rows], status.text


def test_shapes_field_sizes_a_decoder_by_named_dimensions(browser, server, predictor):  # noqa: F811 - fixtures
    """The page's Shapes field takes inputs and named dimensions as --shape does; a typo is a one-line error."""
    from tests.test_named_dimensions import KV_CACHE

    shapes = {"batch_size": (8,), "sequence_length": (1,), "past_sequence_length": (1023,)}
    ranking = predictor.rank(KV_CACHE, gpus=DEVICES, shapes=shapes)
    browser.get(server + "/")
    rows, status = _rank_on_the_page(browser, KV_CACHE,
                                     {"shapes": "batch_size=8, sequence_length=1 past_sequence_length=1023"})
    assert status == "Done." and rows == [(e.gpu, e.mig, js_ms(e.latency_ms)) for e in ranking]
    _, status = _rank_on_the_page(browser, KV_CACHE, {"shapes": "past_sequence_length=10x"})
    assert status == ('Error: cannot read shape "past_sequence_length=10x"; write NAME=D1xD2 (an input) or NAME=N '
                      '(a named dimension)')


def test_values_field_picks_a_merged_decoders_branch(browser, server, predictor):  # noqa: F811 - fixtures
    """The page's Input values field sets run-time inputs as --value does; a word that is not a value is an error."""
    from tests.test_branches import DECODE, MERGED

    ranking = predictor.rank(MERGED, gpus=DEVICES, shapes=DECODE, values={"use_cache_branch": [False]})
    shapes = " ".join(f"{name}={size[0]}" for name, size in DECODE.items())
    browser.get(server + "/")
    rows, status = _rank_on_the_page(browser, MERGED, {"shapes": shapes, "values": "use_cache_branch=false"})
    assert status == "Done." and rows == [(e.gpu, e.mig, js_ms(e.latency_ms)) for e in ranking]
    _, status = _rank_on_the_page(browser, MERGED, {"values": "use_cache_branch=maybe"})
    assert status == 'Error: cannot read value "use_cache_branch=maybe"; write NAME=true, NAME=false or NAME=number'


def test_llm_form_takes_an_uploaded_config(browser, server, tmp_path):  # noqa: F811 - the imported fixture
    """A config.json chosen on the page is uploaded instead of the model name, the Model box empty: DeepSeek-V3's,
    with its FP8 quantization_config, priced as `lilou llm` prices the same file (its latent KV cache, FP8 by
    default)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from lilou.llm import LLMPredictor
    from tests.test_llm import DEEPSEEK_V3_CONFIG

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**DEEPSEEK_V3_CONFIG, "quantization_config": {"quant_method": "fp8"}}))
    browser.get(server + "/")
    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#llm-models option")) > 100)
    # the Model box left empty: a chosen config.json stands for it (the box was `required`, and the browser stopped
    # the form with "Please fill out this field")
    for field, value in (("llm-model", ""), ("llm-gpu", "h200"), ("llm-tp", "8"), ("llm-batch", "4")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.find_element(By.ID, "llm-config").send_keys(str(path))
    browser.find_element(By.ID, "llm-button").click()
    status = browser.find_element(By.ID, "llm-status")
    wait.until(lambda d: status.text == "Done." or status.text.startswith("Error"))
    assert status.text == "Done.", status.text
    terms = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#llm-result dt")]
    shown = dict(zip(terms, [v.text for v in browser.find_elements(By.CSS_SELECTOR, "#llm-result dd")]))
    expected = LLMPredictor().predict(str(path), "h200", tp=8, batch=4, input_len=512, output_len=128).to_json()
    assert shown["inter-token latency (ms)"].startswith(js_number(expected["itl_ms"]) + " (90 %: ")
    warnings = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#llm-warnings li")]
    assert warnings[0] == "no --dtype given: FP8, the checkpoint's own (fp8, its quantization_config)"


def _click_breakdown(browser, gpu: str) -> str:
    """Click the breakdown button of ``gpu``'s row (a whole GPU); the breakdown's title once the page is done."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    status = browser.find_element(By.ID, "rank-status")
    browser.execute_script("arguments[0].textContent = ''", status)
    for row in browser.find_elements(By.CSS_SELECTOR, "#ranking tbody tr"):
        cells = row.find_elements(By.TAG_NAME, "td")
        if cells[1].text == gpu and cells[2].text == "–":
            row.find_element(By.TAG_NAME, "button").click()
            break
    else:
        raise AssertionError(f"no row for {gpu}")
    WebDriverWait(browser, 90).until(lambda d: status.text == "Done." or status.text.startswith("Error:"))
    assert status.text == "Done.", status.text
    return browser.find_element(By.ID, "breakdown-title").text


def test_a_breakdown_predicts_what_its_ranking_shows(browser, server, predictor, zoo_onnx):  # noqa: F811 - fixtures
    """The breakdown read the live form: ranked at batch 1, then Batch set to 64, t4's breakdown showed batch 64's
    368.9 ms under a table of 6.492 ms (report ua39a item 12). It predicts the ranking's own inputs now."""
    from selenium.webdriver.common.by import By

    dynamic = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    ranking = predictor.rank(dynamic, gpus=DEVICES, batch=1)
    browser.get(server + "/")
    rows, status = _rank_on_the_page(browser, dynamic, {"batch": "1"})
    assert status == "Done." and rows == [(e.gpu, e.mig, js_ms(e.latency_ms)) for e in ranking]
    box = browser.find_element(By.ID, "batch")
    box.clear()
    box.send_keys("64")
    title = _click_breakdown(browser, "t4")
    expected = predictor.predict(dynamic, gpu="t4", batch=1)
    assert title.startswith(f"Kernel breakdown on t4, batch 1: {js_ms(expected.latency_ms)} ms")
    assert f"{len(expected.kernels)} kernels" in title


def test_an_error_clears_the_results_it_does_not_belong_to(browser, server, predictor):  # noqa: F811 - fixtures
    """After a ranking, a request that failed changed only the status line: the table, chart and warnings of the
    earlier request stayed, as if they answered it; the LLM form kept its earlier figures likewise (report ua39a
    item 12)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "/")
    rows, status = _rank_on_the_page(browser, RESNET18, {})
    assert status == "Done." and len(rows) == len(DEVICES)
    assert browser.find_element(By.ID, "breakdown").is_displayed()
    _, status = _rank_on_the_page(browser, RESNET18, {"batch": "8"})   # the file's batch is 1: a 400
    assert status.startswith("Error: ")
    for element in ("ranking", "breakdown", "warnings-box"):
        assert not browser.find_element(By.ID, element).is_displayed(), element
    assert browser.find_elements(By.CSS_SELECTOR, "#ranking tbody tr") == []

    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#llm-models option")) > 100)
    llm_status = browser.find_element(By.ID, "llm-status")
    for gpu, done in (("a100-80gb", "Done."), ("no-such-gpu", "Error: unknown GPU 'no-such-gpu'")):
        for field, value in (("llm-model", "llama-3.1-8b"), ("llm-gpu", gpu)):
            box = browser.find_element(By.ID, field)
            box.clear()
            box.send_keys(value)
        browser.execute_script("arguments[0].textContent = ''", llm_status)
        browser.find_element(By.ID, "llm-button").click()
        wait.until(lambda d: llm_status.text == "Done." or llm_status.text.startswith("Error"))
        assert llm_status.text.startswith(done), llm_status.text
    assert not browser.find_element(By.ID, "llm-result").is_displayed()
    assert browser.find_elements(By.CSS_SELECTOR, "#llm-result dd, #llm-warnings li") == []


def _status_is_an_alert(browser, element: str) -> bool:
    from selenium.webdriver.common.by import By

    status = browser.find_element(By.ID, element)
    return status.get_attribute("role") == "alert" and "error" in status.get_attribute("class").split()


def test_errors_are_alerts_and_success_is_a_status(browser, server):  # noqa: F811 - the imported fixture
    """An error was drawn in the same grey as "Done." in a role="status" region (report ua41a defect 9)."""
    from selenium.webdriver.common.by import By

    browser.get(server + "/")
    _, status = _rank_on_the_page(browser, RESNET18, {"batch": "8"})   # the file's batch is 1: a 400
    assert status.startswith("Error: ") and _status_is_an_alert(browser, "rank-status")
    assert browser.switch_to.active_element == browser.find_element(By.ID, "rank-status")
    error_colour = browser.find_element(By.ID, "rank-status").value_of_css_property("color")
    _, status = _rank_on_the_page(browser, RESNET18, {"batch": "1"})
    assert status == "Done." and not _status_is_an_alert(browser, "rank-status")
    assert browser.find_element(By.ID, "rank-status").get_attribute("role") == "status"
    assert browser.find_element(By.ID, "rank-status").value_of_css_property("color") != error_colour


def test_the_ranking_marks_the_devices_the_model_does_not_fit(browser, server, predictor, zoo_onnx):  # noqa: F811
    """The table read only gpu, mig, latency and interval: a device whose memory the model overflows was ranked like
    any other (report ua41a defect 7). A memory column now says "does not fit" where the API's fits is false."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    devices = ["a100-sxm4-40gb/1g.5gb", "t4", "h100-sxm"]
    dynamic = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    ranking = predictor.rank(dynamic, gpus=devices, batch=1024).to_json()   # 6.2 GiB: not in a 5 GB slice
    assert any(not entry["fits"] for entry in ranking) and any(entry["fits"] for entry in ranking)
    browser.get(server + "/")
    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#devices option")) > 100)
    browser.find_element(By.ID, "file").send_keys(str(dynamic))
    browser.find_element(By.ID, "all-devices").click()
    select = Select(browser.find_element(By.ID, "devices"))
    for value in devices:
        select.select_by_value(value)
    browser.find_element(By.ID, "batch").send_keys("1024")
    status = browser.find_element(By.ID, "rank-status")
    browser.find_element(By.ID, "rank-button").click()
    wait.until(lambda d: status.text == "Done." or status.text.startswith("Error:"))
    assert status.text == "Done.", status.text
    rows = browser.find_elements(By.CSS_SELECTOR, "#ranking tbody tr")
    assert len(rows) == len(ranking)
    for row, entry in zip(rows, ranking):
        memory = row.find_element(By.CSS_SELECTOR, "td.memory").text
        assert memory.startswith(f"{entry['memory_gb']:.2f}")
        assert ("does not fit" in memory) == (not entry["fits"]), (entry["gpu"], entry["mig"], memory)
        assert ("no-fit" in (row.get_attribute("class") or "")) == (not entry["fits"])
    misfits = sum(not entry["fits"] for entry in ranking)
    assert f"does not fit in the memory of {misfits} of them" in browser.find_element(By.ID, "ranking-caption").text


def test_a_narrow_screen_scrolls_the_table_not_the_page_and_keeps_the_chart_readable(browser, server):  # noqa: F811
    """At 390 px the page was 648 px wide (the table pushed it) and the chart's 12 px labels were drawn at about
    5 px (report ua41a defect 5)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
    try:
        browser.get(server + "/")
        wait = WebDriverWait(browser, 90)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#devices option")) > 100)
        browser.find_element(By.ID, "file").send_keys(str(RESNET18))
        status = browser.find_element(By.ID, "rank-status")
        browser.find_element(By.ID, "rank-button").click()   # every device
        wait.until(lambda d: status.text == "Done." or status.text.startswith("Error:"))
        assert status.text == "Done.", status.text
        width = browser.execute_script("return window.innerWidth")
        assert width == 390
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width
        wrap = browser.execute_script("const w = document.querySelector('.table-wrap'); "
                                      "return [w.scrollWidth, w.clientWidth, getComputedStyle(w).overflowX]")
        assert wrap[2] == "auto" and wrap[1] <= width
        # the chart is drawn at the width it gets: its SVG units are CSS pixels, so its labels keep their 12 px
        scale = browser.execute_script("const s = document.querySelector('#chart svg'); "
                                       "return s.getBoundingClientRect().width / s.viewBox.baseVal.width")
        assert scale >= 0.95, scale
        label = browser.execute_script("return document.querySelector('#chart svg text.label')"
                                       ".getBoundingClientRect().height")
        assert label >= 10, label
        # a caption wraps within the screen, not along its table (the plan's ran off the right edge)
        browser.find_element(By.ID, "plan-slo").send_keys("5")
        browser.find_element(By.ID, "plan-prices").send_keys("device,usd_per_hour\nt4,0.5")
        plan_status = browser.find_element(By.ID, "plan-status")
        browser.find_element(By.ID, "plan-button").click()
        wait.until(lambda d: plan_status.text == "Done." or plan_status.text.startswith("Error:"))
        assert plan_status.text == "Done.", plan_status.text
        for caption in ("ranking-caption", "plan-caption"):
            right = browser.execute_script(f"return document.getElementById('{caption}').getBoundingClientRect().right")
            assert right <= width, (caption, right)
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_llm_form_names_what_its_figures_describe_and_clears_a_config(browser, server, tmp_path):  # noqa: F811
    """A chosen config.json silently stood for any name typed after it, and the result never named its model, GPU
    or dtypes (ua41a defect 6); a prediction that does not fit showed figure rows with empty values (defect 9); an
    empty Tensor parallel box was sent as tp 0 (nit 2); the intervals had raw digits and GiB were labelled GB
    (nit 3)."""
    import re

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.test_serve import MIXTRAL

    path = tmp_path / "mixtral.json"
    path.write_text(json.dumps(MIXTRAL))
    browser.get(server + "/")
    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#llm-models option")) > 100)
    status = browser.find_element(By.ID, "llm-status")

    def predict(fields: dict[str, str]) -> dict[str, str]:
        for field, value in fields.items():
            box = browser.find_element(By.ID, field)
            box.clear()
            if value:
                box.send_keys(value)
        browser.execute_script("arguments[0].textContent = ''", status)
        browser.find_element(By.ID, "llm-button").click()
        wait.until(lambda d: status.text == "Done." or status.text.startswith("Error"))
        assert status.text == "Done.", status.text
        terms = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#llm-result dt")]
        return dict(zip(terms, [v.text for v in browser.find_elements(By.CSS_SELECTOR, "#llm-result dd")]))

    browser.find_element(By.ID, "llm-config").send_keys(str(path))
    assert not browser.find_element(By.ID, "llm-model").is_enabled()   # the config stands for it, visibly
    shown = predict({"llm-gpu": "b200", "llm-tp": ""})                   # an empty TP box: the default, 1
    title = browser.find_element(By.ID, "llm-result-title").text
    assert title == "mixtral on b200, batch 1: weights bf16, KV cache bf16, vllm", title
    assert re.fullmatch(r"[\d.]+ \(90 %: [\d.]+ – [\d.]+\)", shown["inter-token latency (ms)"])
    for number in re.findall(r"[\d.]+", shown["inter-token latency (ms)"]):
        assert len(number.replace(".", "").lstrip("0")) <= 4, shown["inter-token latency (ms)"]
    assert shown["memory per GPU (GiB)"].endswith(", fits")

    browser.find_element(By.ID, "llm-config-clear").click()
    assert browser.find_element(By.ID, "llm-model").is_enabled()
    shown = predict({"llm-model": "llama-3.1-8b", "llm-gpu": "a100-sxm4-80gb", "llm-tp": "1"})
    assert browser.find_element(By.ID, "llm-result-title").text.startswith(
        "meta-llama/Llama-3.1-8B-Instruct on a100-sxm4-80gb, batch 1: weights bf16")

    shown = predict({"llm-model": "llama-3.1-8b", "llm-gpu": "t4"})      # 15 GiB of weights in 15 GiB: no fit
    assert shown["result"].startswith("does not fit on t4")
    assert "time to first token (ms)" not in shown and all(value for value in shown.values())
    assert shown["memory per GPU (GiB)"].endswith(", does not fit")


def test_the_precision_menu_offers_every_precision_the_api_takes(browser, server):  # noqa: F811 - the fixture
    """The menu stopped at int8: int4 and fp4, which /v1/rank and `lilou rank --precision` take, could not be asked."""
    import typing

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from lilou.serve.schemas import Precision

    browser.get(server + "/")
    options = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "precision")).options]
    assert options == ["", *typing.get_args(Precision)]


# Wrap the page's fetch: requests to PATH wait DELAY ms (window.slowDone once the slow one is answered), and
# window.calls counts them; GPU, when set, delays only the requests whose form names that gpu.
SLOW_FETCH = """
const [path, delay, gpu] = arguments, real = window.fetch;
window.calls = 0; window.slowDone = false;
window.fetch = async (url, init) => {
  if (url !== path || (gpu && init.body.get("gpu") !== gpu)) return real(url, init);
  window.calls += 1;
  await new Promise((resolve) => setTimeout(resolve, delay));
  const response = await real(url, init);
  window.slowDone = true;
  return response;
};
"""


def test_a_slow_llm_request_is_sent_once(browser, server):  # noqa: F811 - the imported fixture
    """The LLM button stayed enabled while its request ran: three clicks sent three requests to /v1/llm, and the
    figures shown were those of whichever answered last. It is disabled until the answer is in (and Enter in a box
    does not submit past it)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "/")
    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#llm-models option")) > 100)
    for field, value in (("llm-model", "llama-3.1-8b"), ("llm-gpu", "a100-80gb")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.execute_script(SLOW_FETCH, "/v1/llm", 2000, None)
    button, status = browser.find_element(By.ID, "llm-button"), browser.find_element(By.ID, "llm-status")
    button.click()
    assert not button.is_enabled() and status.text == "Predicting…"
    browser.execute_script("arguments[0].click(); arguments[0].click()", button)
    browser.find_element(By.ID, "llm-gpu").send_keys(Keys.ENTER)
    wait.until(lambda d: status.text == "Done." or status.text.startswith("Error"))
    assert status.text == "Done." and button.is_enabled()
    assert browser.execute_script("return window.calls") == 1


def test_a_breakdown_answered_late_does_not_replace_the_one_asked_after_it(browser, server):  # noqa: F811
    """Two breakdown buttons clicked in turn: the first request's answer, arriving after the second's, was drawn
    over it, so the chart showed t4 after a10g had been asked for. The latest request's answer stays."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "/")
    rows, status = _rank_on_the_page(browser, RESNET18, {})
    assert status == "Done." and len(rows) == len(DEVICES)
    browser.execute_script(SLOW_FETCH, "/v1/predict", 3000, "t4")
    buttons = {row.find_elements(By.TAG_NAME, "td")[1].text: row.find_element(By.TAG_NAME, "button")
               for row in browser.find_elements(By.CSS_SELECTOR, "#ranking tbody tr")}
    buttons["t4"].click()
    title = _click_breakdown(browser, "a10g")
    assert title.startswith("Kernel breakdown on a10g")
    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: d.execute_script("return window.slowDone"))
    time.sleep(1)   # the late answer's own handling
    assert browser.find_element(By.ID, "breakdown-title").text == title
    assert browser.find_element(By.ID, "rank-status").text == "Done."


def test_no_answer_from_the_server_says_so(browser, server):  # noqa: F811 - the imported fixture
    """A request that got no answer at all (the server stopped) showed the browser's bare "Error: Failed to fetch"."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "/")
    WebDriverWait(browser, 90).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#llm-models option")) > 100)
    browser.execute_script("window.fetch = async () => { throw new TypeError('Failed to fetch'); }")
    browser.find_element(By.ID, "llm-button").click()
    status = browser.find_element(By.ID, "llm-status")
    WebDriverWait(browser, 30).until(lambda d: status.text.startswith("Error"))
    assert status.text == "Error: no answer from the Lilou server (Failed to fetch); is it still running?"
    assert browser.find_element(By.ID, "llm-button").is_enabled()


def test_the_plan_form_shows_the_apis_plan_and_its_errors(browser, server):  # noqa: F811 - the imported fixture
    """The page had no way to ask /v1/plan: an SLO, batches and prices could not be given, nor a plan seen. Its form
    plans the file and devices chosen above; its rows, message, unmet devices and errors are the API's."""
    import httpx
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    prices = "device,usd_per_hour\nt4,0.5\na10g,1.01"
    browser.get(server + "/")
    rows, status = _rank_on_the_page(browser, RESNET18, {"plan-prices": prices, "plan-slo": "5"})
    assert status == "Done."
    wait = WebDriverWait(browser, 90)
    devices = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "devices")).all_selected_options]

    def planned(slo: str, prices: str) -> tuple[str, list[list[str]]]:
        for field, value in (("plan-slo", slo), ("plan-prices", prices)):
            box = browser.find_element(By.ID, field)
            box.clear()
            box.send_keys(value)
        status = browser.find_element(By.ID, "plan-status")
        browser.execute_script("arguments[0].textContent = ''", status)
        browser.find_element(By.ID, "plan-button").click()
        wait.until(lambda d: status.text == "Done." or status.text.startswith("Error:"))
        return status.text, [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
                             for row in browser.find_elements(By.CSS_SELECTOR, "#plan tbody tr")]

    def api(slo: str, prices: str) -> httpx.Response:
        with open(RESNET18, "rb") as handle:
            return httpx.post(server + "/v1/plan", files={"file": ("resnet18.onnx", handle)}, timeout=120,
                              data={"slo_ms": slo, "gpus": ",".join(devices), "prices": prices})

    status, rows = planned("5", prices)
    body = api("5", prices).json()
    assert status == "Done." and body["plan"]
    assert rows == [[e["device"], str(e["batch"]), js_ms(e["latency_ms"]),
                     f"{js_ms(e['interval_ms'][0])} – {js_ms(e['interval_ms'][1])}", js_number(e["throughput_per_s"]),
                     "–" if e["usd_per_hour"] is None else f"{e['usd_per_hour']:.2f}",
                     "–" if e["usd_per_million"] is None else js_number(e["usd_per_million"]),
                     f"{e['memory_gb']:.2f}"] for e in body["plan"]]
    assert browser.find_element(By.ID, "plan-caption").text.startswith(
        f"{len(body['plan'])} of {len(DEVICES)} devices meet the SLO of 5 ms, cheapest per million first")
    assert [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#plan-warnings li")] == body["warnings"]

    status, rows = planned("0.5", "")   # no device meets it: the API's message and each device's reason
    body = api("0.5", "").json()
    assert status == "Done." and rows == [] and not browser.find_element(By.ID, "plan").is_displayed()
    assert browser.find_element(By.ID, "plan-message").text == body["message"]
    assert [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#plan-unmet li")] == [
        f"not met on {u['device']}: {u['reason']}" for u in body["unmet"]]

    status, rows = planned("5", "garbage")   # the service's line; nothing of the plans before it stays
    assert status == "Error: " + api("5", "garbage").json()["detail"]
    assert rows == [] and browser.find_elements(By.CSS_SELECTOR, "#plan-message:not([hidden]), #plan-unmet li, "
                                                                  "#plan-warnings li") == []

    # a device that runs the precision weight-only says so beside its name, as in the ranking
    Select(browser.find_element(By.ID, "precision")).select_by_visible_text("int4")
    status, rows = planned("50", "")
    assert status == "Done." and rows and all(row[0].endswith(" (weight-only)") for row in rows)


def test_the_llm_form_offers_every_dtype_and_kv_cache_dtype_lilou_llm_takes(browser, server):  # noqa: F811
    """The weights menu had no fp32 and there was no KV-cache menu: /v1/llm's kv_dtype (an FP8 cache beside BF16
    weights, vLLM's --kv-cache-dtype fp8) could not be asked from the page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from lilou.llm.predictor import DTYPES, KV_DTYPES

    browser.get(server + "/")
    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#llm-models option")) > 100)
    for menu, values in (("llm-dtype", DTYPES), ("llm-kv-dtype", KV_DTYPES)):
        options = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, menu)).options]
        assert options == ["", *values], menu
    for field, value in (("llm-model", "llama-3.1-8b"), ("llm-gpu", "h100-sxm")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    Select(browser.find_element(By.ID, "llm-kv-dtype")).select_by_visible_text("fp8")
    status = browser.find_element(By.ID, "llm-status")
    browser.find_element(By.ID, "llm-button").click()
    wait.until(lambda d: status.text == "Done." or status.text.startswith("Error"))
    assert status.text == "Done.", status.text
    assert browser.find_element(By.ID, "llm-result-title").text == (
        "meta-llama/Llama-3.1-8B-Instruct on h100-sxm, batch 1: weights bf16, KV cache fp8, vllm")


def test_the_largest_batch_that_fits_is_shown_whole(browser, server):  # noqa: F811 - the imported fixture
    """Every LLM figure was cut to 4 significant digits, counts too: Qwen2.5-0.5B on an H200 at 8 + 8 tokens fits
    163489 sequences, and the page said 163500."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from lilou.llm import LLMPredictor

    expected = LLMPredictor().predict("Qwen/Qwen2.5-0.5B-Instruct", "h200", input_len=8, output_len=8).to_json()
    assert expected["max_batch_fitting"] > 9999
    browser.get(server + "/")
    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#llm-models option")) > 100)
    for field, value in (("llm-model", "Qwen/Qwen2.5-0.5B-Instruct"), ("llm-gpu", "h200"), ("llm-input", "8"),
                         ("llm-output", "8")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    status = browser.find_element(By.ID, "llm-status")
    browser.find_element(By.ID, "llm-button").click()
    wait.until(lambda d: status.text == "Done." or status.text.startswith("Error"))
    assert status.text == "Done.", status.text
    terms = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#llm-result dt")]
    shown = dict(zip(terms, [v.text for v in browser.find_elements(By.CSS_SELECTOR, "#llm-result dd")]))
    assert shown["largest batch that fits"] == str(expected["max_batch_fitting"])
    assert shown["tokens/s"] == js_number(expected["tokens_per_s"])

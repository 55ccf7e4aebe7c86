"""The HTML eval report as a stakeholder reads it: no PASS without a threshold, reproducible (versions,
date, command, paths, tasks), numbers that do not wrap, failing metric marked, small Δp readable, histogram
ticks at powers of ten, 0% bars visible."""

from __future__ import annotations

import re

from qcheck.eval.html import power_of_ten_ticks, render_html
from support.eval_report import EDGES, META, candidate, data


def test_no_threshold_is_not_a_pass_and_the_run_is_reproducible():
    page = render_html(data({}, [candidate("q8", 3.22e-6)]), META)
    h1 = re.search(r"<h1>.*?</h1>", page).group(0)
    assert "PASS" not in h1 and "not gated" in h1
    assert "no threshold" in page and '<span class="pass">PASS</span>' not in page
    for text in ("2026-12-01 16:00 UTC", "torch 2.13.0", "transformers 5.24.0", "qcheck 0.1.0",
                 "qcheck eval -r /models/bf16", "/models/q8.gguf", "arith (4)", "trivia (6)", "/tasks/trivia.jsonl"):
        assert text in page, text


def test_failing_metric_is_marked_and_numbers_do_not_wrap():
    failure = {"threshold": "max_kld", "metric": "kld_mean", "value": 7.2e-4, "limit": 1e-4, "message": "kld_mean"}
    page = render_html(data({"max_kld": 1e-4}, [candidate("q8", 3.22e-6), candidate("q4", 7.22e-4, [failure])]),
                       META)
    assert '<span class="fail">FAIL</span></h1>' in page
    rows = re.findall(r"<tr><td>mean KLD \(95% CI\)</td>(.*?)</tr>", page)[0]
    q8, q4 = re.findall(r"<td[^>]*>", rows)
    assert "failed" not in q8 and 'class="failed"' in q4
    assert "td,th{white-space:nowrap}" in page and "svg{max-width:100%" in page
    assert "<th>metric</th><th>q8</th><th>q4</th>" in page  # metrics down: the table stays narrow


def test_small_delta_p_keeps_its_digits():
    page = render_html(data({}, [candidate("q8", 3.22e-6)]), META)
    assert "<tr><td>RMS Δp</td><td>0.0123%</td></tr>" in page


def test_histogram_ticks_are_powers_of_ten_and_zero_bars_show():
    ticks = power_of_ten_ticks(EDGES)
    assert [t for t, _ in ticks] == [None, -6, -5, -4, -3, -2, -1, 0, 1]
    assert [round(x, 6) for _, x in ticks] == [0, 1, 5, 9, 13, 17, 21, 25, 29]
    page = render_html(data({}, [candidate("q8", 3.22e-6, acc=0.0)]), META)
    assert "10<tspan dy='-5' font-size='8'>-6</tspan>" in page
    assert page.count('class="zero"') == 2  # arith and trivia at 0% for q8: labelled, not blank


def test_simulation_kv_split_and_positions_are_shown():
    c = candidate("q8", 1.6e-4)
    c["simulation"] = {"engine": "llama.cpp", "activations": "q8_0 before 15 Linear layer(s)",
                       "kv_cache": {"description": "KV cache q4_0 as llama.cpp's CPU flash attention stores it"},
                       "effects_left_out": ["llama.cpp's summation order"]}
    part = {"kld_mean": 1.59e-4, "kld_mean_interval": {"low": 1.45e-4, "high": 1.73e-4}, "top1_agreement": 0.818,
            "label": "reference weights + KV cache q4_0 (emulated)"}
    c["kv_cache"] = {"k": "q4_0", "v": "q4_0", "split": {"weights": {"kld_mean": 5.4e-6, "top1_agreement": 0.98},
                                                        "kv": part, "both": {"kld_mean": 1.6e-4}}}
    c["by_position"] = [{"from": 0, "to": 512, "tokens": 4000, "kld_mean": 1e-4, "max_position": 511},
                        {"from": 512, "to": 2048, "tokens": 1020, "kld_mean": 3e-4, "max_position": 1023,
                         "kld_mean_interval": {"low": 2e-4, "high": 4e-4}}]
    page = render_html(data({}, [c]), META)
    for text in ("Simulated as llama.cpp computes", "The number leaves out: llama.cpp&#x27;s summation order",
                 "<td>KV cache alone</td><td>1.59e-04", "reference weights + KV cache q4_0 (emulated)",
                 "<td>512-2048</td><td>1,020</td>"):
        assert text in page, text
    assert "<script" not in page


def test_settings_read_as_words_not_python_dicts():
    record = data({}, [candidate("q8", 3.22e-6)])
    record["settings"] = {"max_length": 512, "kv_cache": {"k": "q8_0", "v": "q4_0"},
                          "kv_cache_by_candidate": {"q8": {"k": "f16", "v": None}}, "max_items": None}
    row = render_html(record, META).split("<td>settings</td>")[1].split("</tr>")[0]
    assert "kv cache K q8_0, V q4_0" in row and "kv cache by candidate q8: K f16, V default" in row
    assert "max items -" in row and "{" not in row

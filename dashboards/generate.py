#!/usr/bin/python3
"""Writes the Grafana dashboards (dashboards/grafana/*.json) from the panel lists below.

The dashboards are generated so every panel has the same templating (datasource, job, layer, gemm,
operand) and the same conventions; tests check that the committed JSON equals this script's output
and that every metric an expression uses is in fp8scoped's metrics table.

    dashboards/generate.py            # rewrite the JSON files
    dashboards/generate.py --check    # exit 1 if a committed file differs
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "grafana")

# Series selectors the panels share; $job etc. are the dashboard's variables.
T = 'job=~"$job", layer=~"$layer", gemm=~"$gemm", operand=~"$operand"'
R = T + ', recipe=~"$recipe"'


def variable(name, query, include_all=True, multi=True):
    return {
        "name": name, "label": name, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
        "includeAll": include_all, "multi": multi, "allValue": ".*", "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]} if include_all else {},
    }


def templating(extra=()):
    items = [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0},
        variable("job", "label_values(fp8scope_last_step, job)"),
        variable("layer", 'label_values(fp8scope_last_step{job=~"$job"}, layer)'),
        variable("gemm", 'label_values(fp8scope_last_step{job=~"$job"}, gemm)'),
        variable("operand", 'label_values(fp8scope_last_step{job=~"$job"}, operand)'),
    ]
    items.extend(extra)
    return {"list": items}


RECIPE = variable("recipe", 'label_values(fp8scope_mse{job=~"$job"}, recipe)', include_all=False, multi=False)
RECIPE["current"] = {"selected": True, "text": "tensor_current", "value": "tensor_current"}


def target(expr, legend="", ref="A", fmt=None):
    t = {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr, "refId": ref,
         "legendFormat": legend}
    if fmt:
        t["format"] = fmt
    return t


def panel(title, kind, targets, x, y, w=12, h=8, unit=None, description="", extra=None):
    p = {"title": title, "type": kind, "description": description,
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "gridPos": {"x": x, "y": y, "w": w, "h": h}, "targets": targets,
         "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []}, "options": {}}
    if extra:
        p.update(extra)
    return p


def dashboard(uid, title, description, panels, extra_vars=()):
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    return {
        "uid": uid, "title": title, "description": description, "tags": ["fp8scope"], "editable": True,
        "schemaVersion": 38, "version": 1, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "templating": templating(extra_vars), "panels": panels,
        "links": [{"title": "fp8scope", "type": "dashboards", "tags": ["fp8scope"], "asDropdown": True}],
    }


def worst(title, metric, x, y, lower_is_worse=False, unit="percentunit"):
    fn = "bottomk" if lower_is_worse else "topk"
    return panel(title, "bargauge",
                 [target(f'{fn}(10, max by (layer, gemm, operand) ({metric}{{{R}}}))',
                         "{{layer}} {{gemm}} {{operand}}", fmt="time_series")],
                 x, y, w=6, h=9, unit=unit,
                 description=f"The ten worst tensors by {metric} for the chosen recipe (worst rank).",
                 extra={"options": {"displayMode": "gradient", "orientation": "horizontal",
                                    "reduceOptions": {"calcs": ["lastNotNull"]}}})


def trend(title, expr, legend, x, y, unit, w=12, description=""):
    return panel(title, "timeseries", [target(expr, legend)], x, y, w=w, unit=unit, description=description)


overview = dashboard(
    "fp8scope-overview", "fp8scope / overview",
    "Which layers and tensors FP8 hurts, worst first, and how it trends.",
    [
        worst("Worst underflow", "fp8scope_underflow_ratio", 0, 0),
        worst("Worst overflow", "fp8scope_overflow_ratio", 6, 0),
        worst("Worst MSE", "fp8scope_mse", 12, 0, unit="short"),
        worst("Lowest cosine", "fp8scope_cosine_similarity", 18, 0, lower_is_worse=True, unit="none"),
        trend("Underflow ratio", f"max by (layer, gemm, operand) (fp8scope_underflow_ratio{{{R}}})",
              "{{layer}} {{gemm}} {{operand}}", 0, 9, "percentunit"),
        trend("Overflow ratio", f"max by (layer, gemm, operand) (fp8scope_overflow_ratio{{{R}}})",
              "{{layer}} {{gemm}} {{operand}}", 12, 9, "percentunit"),
        trend("Cosine similarity", f"min by (layer, gemm, operand) (fp8scope_cosine_similarity{{{R}}})",
              "{{layer}} {{gemm}} {{operand}}", 0, 17, "none"),
        trend("Non-finite elements", f"max by (layer, gemm, operand) (fp8scope_nonfinite_ratio{{{T}}})",
              "{{layer}} {{gemm}} {{operand}}", 12, 17, "percentunit"),
    ], [RECIPE])

layer = dashboard(
    "fp8scope-layer", "fp8scope / layer",
    "Every statistic of the chosen tensors over time, delayed vs current scale, and where their "
    "scaled magnitudes sit against the FP8 window.",
    [
        trend("Underflow (all recipes)", f"fp8scope_underflow_ratio{{{T}}}", "{{recipe}} {{format}} {{operand}}", 0, 0,
              "percentunit", w=8),
        trend("Overflow (all recipes)", f"fp8scope_overflow_ratio{{{T}}}", "{{recipe}} {{format}} {{operand}}", 8, 0,
              "percentunit", w=8),
        trend("SQNR", f"fp8scope_sqnr_db{{{T}}}", "{{recipe}} {{format}} {{operand}}", 16, 0, "dB", w=8),
        trend("MSE", f"fp8scope_mse{{{T}}}", "{{recipe}} {{format}} {{operand}}", 0, 8, "short", w=8),
        trend("Saturation", f"fp8scope_saturation_ratio{{{T}}}", "{{recipe}} {{format}} {{operand}}", 8, 8,
              "percentunit", w=8),
        trend("amax and amin", f"fp8scope_amax{{{T}}} or fp8scope_amin{{{T}}}", "{{__name__}} {{operand}}", 16, 8,
              "short", w=8),
        panel("Delayed vs current scale", "timeseries",
              [target(f'fp8scope_scale{{{T}, recipe="tensor_delayed"}}', "delayed {{format}} {{operand}}", "A"),
               target(f"fp8scope_scale_current{{{T}}}", "current {{format}} {{operand}}", "B")],
              0, 16, w=12, unit="short",
              description="A delayed scale above the current one means the tensor grew since the history was "
                          "recorded: expect overflow. Far below: wasted range, expect underflow."),
        trend("Delayed / current scale", f'fp8scope:delayed_scale_lag:ratio{{{T}}}', "{{format}} {{operand}}", 12, 16,
              "none"),
        panel("log2 |x*s| under current scaling (FP8 window: E4M3 2^-9..2^8, E5M2 2^-16..2^15)", "heatmap",
              [target(f'max by (log2) (fp8scope_log2_magnitude_ratio{{{T}, recipe="tensor_current"}})',
                      "{{log2}}", fmt="heatmap")],
              0, 24, w=24, h=10,
              extra={"options": {"calculate": False, "yAxis": {"unit": "short"},
                                 "cellGap": 1, "color": {"scheme": "Oranges", "mode": "scheme"}}}),
        trend("Dynamic range", f"fp8scope_dynamic_range_log2{{{T}}}", "{{operand}}", 0, 34, "short"),
        trend("Last step", f"fp8scope_last_step{{{T}}}", "{{operand}}", 12, 34, "short"),
        panel("The job's own block scales at their floor and ceiling (MXFP8, NVFP4, FP8 blocks)", "timeseries",
              [target(f'fp8scope_block_scale_floor_ratio{{{T}, recipe="observed"}}', "floor {{format}} {{operand}}", "A"),
               target(f'fp8scope_block_scale_ceiling_ratio{{{T}, recipe="observed"}}', "ceiling {{format}} {{operand}}",
                      "B")],
              0, 42, w=12, unit="percentunit",
              description="Share of the job's scale blocks whose scale sits at its encoding's smallest value (the "
                          "block's values are tiny for the format: E8M0 2^-127, UE4M3 0 or 2^-9) or largest "
                          "(E8M0 2^127, NVFP4's UE4M3 448: the block holds the tensor's amax)."),
        trend("Widest scale block (binades)", f'fp8scope_max_block_dynamic_range_log2{{{T}, recipe="observed"}}',
              "{{format}} {{operand}}", 12, 42, "short"),
    ])

gemm = dashboard(
    "fp8scope-gemm", "fp8scope / GEMM output error",
    "The forward GEMM's FP8 output (E4M3, current scales) against its high-precision output, per layer.",
    [
        trend("Output cosine similarity", 'min by (layer, accumulate) (fp8scope_gemm_output_cosine_similarity{job=~"$job", layer=~"$layer"})',
              "{{layer}} {{accumulate}}", 0, 0, "none"),
        trend("Output MSE", 'max by (layer, accumulate) (fp8scope_gemm_output_mse{job=~"$job", layer=~"$layer"})',
              "{{layer}} {{accumulate}}", 12, 0, "short"),
        trend("Output max relative error", 'max by (layer, accumulate) (fp8scope_gemm_output_max_rel_error{job=~"$job", layer=~"$layer"})',
              "{{layer}} {{accumulate}}", 0, 8, "percentunit", w=24),
    ])

health = dashboard(
    "fp8scope-health", "fp8scope / daemon health",
    "fp8scoped's own throughput, drops, queue, analysis latency and clients.",
    [
        trend("Samples per second", "sum(rate(fp8scope_samples_total[5m]))", "received", 0, 0, "ops"),
        trend("Dropped samples per second", "sum by (reason) (rate(fp8scope_samples_dropped_total[5m]))", "{{reason}}",
              12, 0, "ops"),
        trend("Received bytes per second", "sum(rate(fp8scope_received_bytes_total[5m]))", "bytes", 0, 8, "Bps"),
        panel("Queue", "timeseries",
              [target("sum(fp8scope_queue_bytes)", "queued", "A"), target("sum(fp8scope_queue_budget_bytes)", "budget", "B")],
              12, 8, unit="bytes"),
        panel("Analysis latency", "timeseries",
              [target("histogram_quantile(0.5, sum by (le) (rate(fp8scope_analysis_seconds_bucket[5m])))", "p50", "A"),
               target("histogram_quantile(0.99, sum by (le) (rate(fp8scope_analysis_seconds_bucket[5m])))", "p99", "B")],
              0, 16, unit="s"),
        trend("Connected clients", "sum(fp8scope_clients)", "clients", 12, 16, "short"),
        panel("Series", "timeseries",
              [target("sum(fp8scope_series)", "series", "A"),
               target("sum(increase(fp8scope_series_suppressed_total[1h]))", "suppressed (1h)", "B")],
              0, 24, unit="short"),
        trend("Daemon up", 'up{job="fp8scoped"}', "{{instance}}", 12, 24, "short"),
    ])

DASHBOARDS = {"fp8scope-overview.json": overview, "fp8scope-layer.json": layer, "fp8scope-gemm.json": gemm,
              "fp8scope-health.json": health}


def main():
    check = "--check" in sys.argv
    os.makedirs(OUT, exist_ok=True)
    stale = []
    for name, board in DASHBOARDS.items():
        text = json.dumps(board, indent=2, sort_keys=False) + "\n"
        path = os.path.join(OUT, name)
        if check:
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
    if stale:
        print("stale, run dashboards/generate.py: " + ", ".join(stale))
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes the Grafana dashboards (dashboards/grafana/*.json on Prometheus, dashboards/grafana-postgresql/*.json
on the PostgreSQL history) from the panel lists below.

The dashboards are generated so every panel follows the same conventions (its variables filter it,
legends name the tensor, a description); tests check that the committed JSON equals this script's output
and that every metric an expression uses is in fp8scoped's metrics table.

    dashboards/generate.py            # rewrite the JSON files
    dashboards/generate.py --check    # exit 1 if a committed file differs
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "grafana")

# Series selectors the panels share; $job etc. are the dashboard's variables. `instance` and `node`
# are where a series was scraped (node: the fleet agent's external label); every panel filters on them.
WHERE = 'instance=~"$instance", node=~"$node"'
T = WHERE + ', job=~"$job", layer=~"$layer", gemm=~"$gemm", operand=~"$operand"'
R = T + ', recipe=~"$recipe"'
G = WHERE + ', job=~"$job", layer=~"$layer"'
TENSOR = "{{layer}} {{gemm}} {{operand}}"  # legend of a series per tensor
EVERY = TENSOR + " {{recipe}} {{format}} {{instance}}"  # legend of a series per daemon and recipe


def variable(name, query, include_all=True, multi=True):
    return {
        "name": name, "label": name, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
        "includeAll": include_all, "multi": multi, "allValue": ".*", "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]} if include_all else {},
    }


DATASOURCE = {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
              "current": {}, "hide": 0}
INSTANCE = variable("instance", "label_values(fp8scope_build_info, instance)")
NODE = variable("node", "label_values(fp8scope_build_info, node)")
JOB = variable("job", "label_values(fp8scope_last_step, job)")
LAYER = variable("layer", 'label_values(fp8scope_last_step{job=~"$job"}, layer)')
GEMM = variable("gemm", 'label_values(fp8scope_last_step{job=~"$job"}, gemm)')
OPERAND = variable("operand", 'label_values(fp8scope_last_step{job=~"$job"}, operand)')
RECIPE = variable("recipe", 'label_values(fp8scope_mse{job=~"$job"}, recipe)', include_all=False, multi=False)
RECIPE["current"] = {"selected": True, "text": "tensor_current", "value": "tensor_current"}
TENSOR_VARIABLES = [DATASOURCE, NODE, INSTANCE, JOB, LAYER, GEMM, OPERAND]


def target(expr, legend="", ref="A", fmt=None, instant=False):
    t = {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr, "refId": ref,
         "legendFormat": legend}
    if fmt:
        t["format"] = fmt
    if instant:
        t.update({"instant": True, "range": False})
    return t


def panel(title, kind, targets, x, y, w=12, h=8, unit=None, description="", log_axis=False, extra=None):
    defaults = {"unit": unit} if unit else {}
    if log_axis:  # magnitudes and scales span many binades
        defaults["custom"] = {"scaleDistribution": {"type": "log", "log": 2}}
    p = {"title": title, "type": kind, "description": description,
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "gridPos": {"x": x, "y": y, "w": w, "h": h}, "targets": targets,
         "fieldConfig": {"defaults": defaults, "overrides": []}, "options": {}}
    if extra:
        p.update(extra)
    return p


def dashboard(uid, title, description, panels, variables):
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    return {
        "uid": uid, "title": title, "description": description, "tags": ["fp8scope"], "editable": True,
        "schemaVersion": 38, "version": 1, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": list(variables)}, "panels": panels,
        "links": [{"title": "fp8scope", "type": "dashboards", "tags": ["fp8scope"], "asDropdown": True}],
    }


# From a worst-tensor bar to that tensor on the layer dashboard, keeping the time range and data source.
LAYER_LINK = {"title": "${__field.labels.layer} ${__field.labels.gemm} ${__field.labels.operand} on the layer dashboard",
              "url": "/d/fp8scope-layer/fp8scope-layer?${datasource:queryparam}&${instance:queryparam}"
                     "&${node:queryparam}&var-job=${__field.labels.job}&var-layer=${__field.labels.layer}"
                     "&var-gemm=${__field.labels.gemm}&var-operand=${__field.labels.operand}&${__url_time_range}"}


def worst(title, metric, x, y, what, lower_is_worse=False, unit="percentunit"):
    # The worst node's value per tensor, then the ten worst tensors, at the dashboard's end time.
    pick, per_tensor = ("bottomk", "min") if lower_is_worse else ("topk", "max")
    return panel(title, "bargauge",
                 [target(f'{pick}(10, {per_tensor} by (job, layer, gemm, operand) ({metric}{{{R}}}))',
                         "{{job}} " + TENSOR, fmt="time_series", instant=True)],
                 x, y, w=6, h=9, unit=unit,
                 description=f"The ten tensors with the {what} under the chosen recipe, each at its worst node. "
                             "Click a bar to open that tensor on the layer dashboard.",
                 extra={"options": {"displayMode": "gradient", "orientation": "horizontal",
                                    "reduceOptions": {"calcs": ["lastNotNull"]}},
                        "fieldConfig": {"defaults": {"unit": unit, "links": [LAYER_LINK]}, "overrides": []}})


def trend(title, expr, legend, x, y, unit, description, w=12, log_axis=False):
    return panel(title, "timeseries", [target(expr, legend)], x, y, w=w, unit=unit, description=description,
                 log_axis=log_axis)


overview = dashboard(
    "fp8scope-overview", "fp8scope / overview",
    "Which layers and tensors FP8 hurts, worst first, and how it trends.",
    [
        worst("Worst underflow", "fp8scope_underflow_ratio", 0, 0, "largest share of nonzero elements that become zero"),
        worst("Worst overflow", "fp8scope_overflow_ratio", 6, 0, "largest share of elements beyond the format's maximum"),
        worst("Worst MSE", "fp8scope_mse", 12, 0, "largest mean squared quantization error", unit="short"),
        worst("Lowest cosine", "fp8scope_cosine_similarity", 18, 0,
              "lowest cosine similarity between the FP8 copy and the original", lower_is_worse=True, unit="none"),
        trend("Underflow ratio", f"max by (job, layer, gemm, operand) (fp8scope_underflow_ratio{{{R}}})", TENSOR, 0, 9,
              "percentunit", "Share of nonzero elements that become zero in FP8 under the chosen recipe, worst node."),
        trend("Overflow ratio", f"max by (job, layer, gemm, operand) (fp8scope_overflow_ratio{{{R}}})", TENSOR, 12, 9,
              "percentunit", "Share of elements beyond the format's maximum (clipped) under the chosen recipe, worst node."),
        trend("Cosine similarity", f"min by (job, layer, gemm, operand) (fp8scope_cosine_similarity{{{R}}})", TENSOR, 0,
              17, "none", "Cosine similarity of the FP8 copy to the original under the chosen recipe, worst node "
                          "(1 = same direction)."),
        trend("Non-finite elements", f"max by (job, layer, gemm, operand) (fp8scope_nonfinite_ratio{{{T}}})", TENSOR,
              12, 17, "percentunit", "Share of NaN and Inf elements in the sampled tensor, worst node."),
    ], TENSOR_VARIABLES + [RECIPE])

layer = dashboard(
    "fp8scope-layer", "fp8scope / layer",
    "Every statistic of the chosen tensors over time, delayed vs current scale, and where their "
    "scaled magnitudes sit against the FP8 window.",
    [
        trend("Underflow (all recipes)", f"fp8scope_underflow_ratio{{{T}}}", EVERY, 0, 0, "percentunit",
              "Share of nonzero elements that become zero in FP8, per recipe and node.", w=8),
        trend("Overflow (all recipes)", f"fp8scope_overflow_ratio{{{T}}}", EVERY, 8, 0, "percentunit",
              "Share of elements beyond the format's maximum, per recipe and node.", w=8),
        trend("SQNR", f"fp8scope_sqnr_db{{{T}}}", EVERY, 16, 0, "dB",
              "Signal to quantization noise ratio of the FP8 copy, per recipe and node (higher is better).", w=8),
        trend("MSE", f"fp8scope_mse{{{T}}}", EVERY, 0, 8, "short",
              "Mean squared error of the FP8 copy against the original, per recipe and node.", w=8, log_axis=True),
        trend("Saturation", f"fp8scope_saturation_ratio{{{T}}}", EVERY, 8, 8, "percentunit",
              "Share of elements that land on the format's largest finite value, per recipe and node.", w=8),
        trend("amax and amin", f"fp8scope_amax{{{T}}} or fp8scope_amin{{{T}}}", "{{__name__}} " + TENSOR + " {{instance}}",
              16, 8, "short", "Largest and smallest nonzero magnitude of the original tensor (log axis).", w=8,
              log_axis=True),
        panel("Delayed vs current scale", "timeseries",
              [target(f'fp8scope_scale{{{T}, recipe="tensor_delayed"}}', "delayed " + TENSOR + " {{format}} {{instance}}", "A"),
               target(f"fp8scope_scale_current{{{T}}}", "current " + TENSOR + " {{format}} {{instance}}", "B")],
              0, 16, w=12, unit="short", log_axis=True,
              description="A delayed scale above the current one means the tensor grew since the history was "
                          "recorded: expect overflow. Far below: wasted range, expect underflow."),
        panel("Delayed / current scale (worst node each way)", "timeseries",
              [target(f'fp8scope:delayed_scale_lag:max{{job=~"$job", layer=~"$layer", gemm=~"$gemm", operand=~"$operand"}}',
                      "max " + TENSOR + " {{format}}", "A"),
               target(f'fp8scope:delayed_scale_lag:min{{job=~"$job", layer=~"$layer", gemm=~"$gemm", operand=~"$operand"}}',
                      "min " + TENSOR + " {{format}}", "B")],
              12, 16, w=12, unit="none", log_axis=True,
              description="The recording rules behind FP8DelayedScaleDrift: 1 means no lag; the alert fires outside "
                          "0.25-2. Aggregated over all daemons, so the node variables do not apply."),
        panel("log2 |x*s| under current scaling (FP8 window: E4M3 2^-9..2^8, E5M2 2^-16..2^15)", "heatmap",
              [target(f'max by (log2) (fp8scope_log2_magnitude_ratio{{{T}, recipe="tensor_current"}})',
                      "{{log2}}", fmt="heatmap")],
              0, 24, w=24, h=10,
              description="Share of nonzero elements per binade of the scaled magnitude, worst node. Exported only "
                          "with fp8scoped --log2-histogram-metrics (64 series per tensor); `fp8scope report` draws "
                          "it from history without.",
              extra={"options": {"calculate": False, "yAxis": {"unit": "short"},
                                 "cellGap": 1, "color": {"scheme": "Oranges", "mode": "scheme"}}}),
        trend("Dynamic range", f"fp8scope_dynamic_range_log2{{{T}}}", TENSOR + " {{instance}}", 0, 34, "short",
              "log2(amax / amin) of the original tensor: binades the values span (E4M3 holds about 17, E5M2 32)."),
        trend("Last step", f"fp8scope_last_step{{{T}}}", TENSOR + " {{instance}}", 12, 34, "short",
              "Training step of the latest sample of each tensor, per node."),
        panel("The job's own block scales at their floor and ceiling (MXFP8, NVFP4, FP8 blocks)", "timeseries",
              [target(f'fp8scope_block_scale_floor_ratio{{{T}, recipe="observed"}}', "floor " + TENSOR + " {{format}} {{instance}}", "A"),
               target(f'fp8scope_block_scale_ceiling_ratio{{{T}, recipe="observed"}}',
                      "ceiling " + TENSOR + " {{format}} {{instance}}", "B")],
              0, 42, w=12, unit="percentunit",
              description="Share of the job's scale blocks whose scale sits at its encoding's smallest value (the "
                          "block's values are tiny for the format: E8M0 2^-127, UE4M3 0 or 2^-9) or largest "
                          "(E8M0 2^127, NVFP4's UE4M3 448: the block holds the tensor's amax)."),
        trend("Widest scale block (binades)", f'fp8scope_max_block_dynamic_range_log2{{{T}, recipe="observed"}}',
              TENSOR + " {{format}} {{instance}}", 12, 42, "short",
              "The largest log2(amax / amin) inside one of the job's own scale blocks: what one scale must cover."),
        # Mixture-of-experts layers: a tensor's series above hold its worst expert; these say which
        # one, how far it is from the others, and how the router loads them.
        trend("Worst expert (MoE layers)", f"fp8scope_expert_worst{{{T}}}",
              TENSOR + " {{statistic}} {{recipe}} {{instance}}", 0, 50, "short",
              "The index of the expert whose latest value of the statistic is the worst of its layer's experts."),
        trend("Experts' median (MoE layers)", f"fp8scope_expert_median_ratio{{{T}}}",
              TENSOR + " {{statistic}} {{recipe}} {{instance}}", 12, 50, "percentunit",
              "The median over the layer's experts; the tensor's own series above is the worst expert. "
              "FP8ExpertOutlier fires when the worst departs far from the median."),
        panel("Expert load (tokens per expert)", "timeseries",
              [target(f"fp8scope_expert_tokens_max{{{G}}}", "{{layer}} busiest expert {{instance}}", "A"),
               target(f"fp8scope_expert_tokens_mean{{{G}}}", "{{layer}} mean {{instance}}", "B"),
               target(f"fp8scope_experts_without_tokens{{{G}}}", "{{layer}} experts without tokens {{instance}}", "C")],
              0, 58, unit="short",
              description="Tokens the router sent to the busiest expert and to each on average in the layer's latest "
                          "sampled call, and how many experts got none."),
        panel("Padding rows that are not zero (grouped GEMMs)", "timeseries",
              [target(f"fp8scope_padding_nonzero_ratio{{{T}}}", "nonzero " + TENSOR + " {{instance}}", "A"),
               target(f"fp8scope_padding_nonfinite_ratio{{{T}}}", "non-finite " + TENSOR + " {{instance}}", "B")],
              12, 58, unit="percentunit",
              description="Share of the padding past an expert's tokens that is not zero (or NaN/Inf): it corrupts "
                          "the valid rows of a grouped GEMM downstream. FP8PaddingNotZero fires on either."),
        trend("Kurtosis", f"fp8scope_kurtosis{{{T}}}", TENSOR + " {{instance}}", 0, 66, "short",
              "Pearson's kurtosis of the original tensor (3 for a normal one, log axis). Activation kurtosis that "
              "keeps growing comes before FP8 divergences (FOG, arXiv 2505.20524).", log_axis=True),
        trend("Kurtosis / its lowest of the last hour (worst node)",
              f'fp8scope:kurtosis:growth_1h{{job=~"$job", layer=~"$layer", gemm=~"$gemm", operand=~"$operand"}}',
              TENSOR, 12, 66, "none",
              "The recording rule behind FP8KurtosisRising, which fires above 2 while the kurtosis is still rising "
              "and above 10. Aggregated over all daemons, so the node variables do not apply."),
        trend("Largest channel amax / median channel amax", f"fp8scope_channel_amax_ratio{{{T}}}",
              TENSOR + " {{instance}}", 0, 74, "short",
              "Of X's columns (input features) and W's rows (output features), log axis. A normal activation's "
              "channels stand within a few times of each other; SwiGLU outlier channels grow to hundreds late in "
              "training (arXiv 2409.12517). fp8scope history --csv names them (outlier_channels).", log_axis=True),
        panel("Persistent outlier channels, and the ratio's growth over its lowest of the last hour", "timeseries",
              [target(f"fp8scope_persistent_outlier_channels{{{T}}}", "persistent " + TENSOR + " {{instance}}", "A"),
               target('fp8scope:channel_amax_ratio:growth_1h{job=~"$job", layer=~"$layer", gemm=~"$gemm", '
                      'operand=~"$operand"}', "growth " + TENSOR, "B")],
              12, 74, unit="short",
              description="Channels above --outlier-channel-factor x the median in each of the tensor's last "
                          "--outlier-channel-window samples, and the recording rule behind FP8OutlierChannelRising, "
                          "which fires while that growth is above 2 and rising, the ratio above 20 and some channel "
                          "persists (the growth is over all daemons)."),
    ], TENSOR_VARIABLES)

gemm = dashboard(
    "fp8scope-gemm", "fp8scope / GEMM output error",
    "The forward GEMM's FP8 output (E4M3, current scales) against its high-precision output, per layer.",
    [
        trend("Output cosine similarity", f'min by (job, layer, accumulate) (fp8scope_gemm_output_cosine_similarity{{{G}}})',
              "{{layer}} fprop {{accumulate}}", 0, 0, "none",
              "Cosine similarity of the FP8 GEMM's output to the high-precision output, worst node."),
        trend("Output MSE", f'max by (job, layer, accumulate) (fp8scope_gemm_output_mse{{{G}}})',
              "{{layer}} fprop {{accumulate}}", 12, 0, "short",
              "Mean squared error of the FP8 GEMM's output, worst node.", log_axis=True),
        trend("Output max relative error", f'max by (job, layer, accumulate) (fp8scope_gemm_output_max_rel_error{{{G}}})',
              "{{layer}} fprop {{accumulate}}", 0, 8, "percentunit",
              "Largest relative error of one output element, worst node.", w=24),
    ], [DATASOURCE, NODE, INSTANCE, JOB, LAYER])

D = '{' + WHERE + '}'
health = dashboard(
    "fp8scope-health", "fp8scope / daemon health",
    "fp8scoped's own throughput, drops, queue, analysis latency and clients, per daemon.",
    [
        trend("Samples per second", f"sum by (instance, node) (rate(fp8scope_samples_total{D}[5m]))",
              "{{instance}} {{node}}", 0, 0, "ops", "Samples received per second by each daemon."),
        trend("Dropped samples per second", f"sum by (instance, node, reason) (rate(fp8scope_samples_dropped_total{D}[5m]))",
              "{{instance}} {{node}} {{reason}}", 12, 0, "ops",
              "Samples dropped per second, by daemon and reason (docs/operations.md lists the reasons)."),
        trend("Received bytes per second", f"sum by (instance, node) (rate(fp8scope_received_bytes_total{D}[5m]))",
              "{{instance}} {{node}}", 0, 8, "Bps", "Sample bytes received per second by each daemon."),
        panel("Queue", "timeseries",
              [target(f"sum by (instance, node) (fp8scope_queue_bytes{D})", "queued {{instance}} {{node}}", "A"),
               target(f"sum by (instance, node) (fp8scope_queue_budget_bytes{D})", "budget {{instance}} {{node}}", "B")],
              12, 8, unit="bytes",
              description="Bytes of samples waiting for analysis against the budget; at the budget new samples "
                          "are dropped as queue_full."),
        panel("Analysis latency", "timeseries",
              [target(f"histogram_quantile(0.5, sum by (instance, node, le) (rate(fp8scope_analysis_seconds_bucket{D}[5m])))",
                      "p50 {{instance}} {{node}}", "A"),
               target(f"histogram_quantile(0.99, sum by (instance, node, le) (rate(fp8scope_analysis_seconds_bucket{D}[5m])))",
                      "p99 {{instance}} {{node}}", "B")],
              0, 16, unit="s", description="Seconds from a sample's dequeue to its published statistics."),
        trend("Connected clients", f"sum by (instance, node) (fp8scope_clients{D})", "{{instance}} {{node}}", 12, 16,
              "short", "Ingest streams (training processes or shippers) connected to each daemon."),
        panel("Series", "timeseries",
              [target(f"sum by (instance, node) (fp8scope_series{D})", "series {{instance}} {{node}}", "A"),
               target(f"sum by (instance, node) (increase(fp8scope_series_suppressed_total{D}[1h]))",
                      "suppressed (1h) {{instance}} {{node}}", "B")],
              0, 24, unit="short",
              description="Tensor series each daemon exports, and those not created because --max-series was reached."),
        trend("Daemon up", f'up{{job="fp8scoped", {WHERE}}}', "{{instance}} {{node}}", 12, 24, "short",
              "1 while Prometheus scrapes the daemon, 0 when it does not answer."),
        # Transformer Engine's casts: what the samples' own figures came from (FP8 and FP4 operands
        # sent without their cast are the drops panel's client_cast_uncovered).
        trend("Samples with their cast", f"sum by (job, source) (rate(fp8scope_cast_samples_total{D}[5m]))",
              "{{job}} {{source}}", 0, 32, "ops",
              "Samples per second that came with the Transformer Engine cast that wrote their codes, by what their "
              "figures were computed from (cast: its input; recompute: a fused kernel's inputs; noop: the cast wrote "
              "nothing)."),
        panel("The code check of fp8scope's model against the job's own casts", "timeseries",
              [target(f"sum by (job, recipe) (rate(fp8scope_cast_code_mismatches_total{D}[5m])) / sum by (job, recipe) "
                      f"(rate(fp8scope_cast_codes_compared_total{D}[5m]))", "{{job}} {{recipe}}", "A")],
              12, 32, unit="percentunit",
              description="Share of the job's codes (and block scales) that fp8scope's model of the recipe casts "
                          "differently from the same input: 0 while the model is right (FP8ScopeCastModelMismatch)."),
    ], [DATASOURCE, NODE, INSTANCE])

DASHBOARDS = {"fp8scope-overview.json": overview, "fp8scope-layer.json": layer, "fp8scope-gemm.json": gemm,
              "fp8scope-health.json": health}

# History by training step, from the PostgreSQL history a job's daemons share (fp8scoped --history
# postgresql://...): Prometheus plots against time, this board against step, one run or a run against
# its baseline. Trend panels take step as their x axis. Values reach SQL through ${var:sqlstring}
# (quoted and escaped) and nothing else: the statistic variable, whose value a URL can set to
# anything, is mapped to its column by a CASE over the fixed list, never interpolated as a name.
# Series are named run and baseline (a run's name is data, not an SQL identifier).
HISTORY_OUT = os.path.join(HERE, "grafana-postgresql")
PG = {"type": "grafana-postgresql-datasource", "uid": "fp8scope-history"}
STATISTICS = ["underflow_ratio", "overflow_ratio", "mse", "cosine", "sqnr_db", "amax", "amin", "dynamic_range_log2",
              "zero_ratio", "nonfinite_ratio", "saturation_ratio", "kurtosis",
              "channel_amax_ratio", "persistent_outlier_channels"]


def statistic_column():
    # An unknown value reads as NULL: the panel is empty, and nothing of the value runs.
    whens = " ".join(f"WHEN '{s}' THEN stat_{s}" for s in STATISTICS)
    return f"CASE ${{statistic:sqlstring}} {whens} END"


def sql_variable(name, sql, label=None):
    return {"name": name, "label": label or name, "type": "query", "datasource": PG, "query": sql,
            "definition": sql, "refresh": 1, "includeAll": False, "multi": False, "sort": 1, "current": {}}


def custom_variable(name, options, label=None):
    return {"name": name, "label": label or name, "type": "custom", "query": ",".join(options),
            "includeAll": False, "multi": False,
            "current": {"selected": True, "text": options[0], "value": options[0]},
            "options": [{"selected": i == 0, "text": o, "value": o} for i, o in enumerate(options)]}


def sql(raw, ref="A", fmt="table"):
    return {"datasource": PG, "refId": ref, "rawQuery": True, "editorMode": "code", "format": fmt, "rawSql": raw}


def by_step(title, targets, x, y, description, w=12, unit=None, log_axis=False):
    p = panel(title, "trend", targets, x, y, w=w, unit=unit, description=description, log_axis=log_axis)
    p["datasource"] = PG
    p["options"] = {"xField": "step", "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"}}
    return p


TENSOR_SQL = ("layer = ${layer:sqlstring} AND gemm = ${gemm:sqlstring} AND operand = ${operand:sqlstring} "
              "AND recipe = ${recipe:sqlstring}")


def loss_sql(run_variable):
    # Rank 0's loss (the lowest rank that logged it), one value per step.
    return (f"SELECT step, value AS {run_variable} FROM fp8scope.scalars WHERE run = ${{{run_variable}:sqlstring}} "
            f"AND name = ${{loss:sqlstring}} AND rank = (SELECT MIN(rank) FROM fp8scope.scalars WHERE "
            f"run = ${{{run_variable}:sqlstring}} AND name = ${{loss:sqlstring}}) ORDER BY step")


def tensor_sql(run_variable, expression):
    # The worst rank's value per step (max over the ranks that sampled the tensor).
    return (f"SELECT step, MAX({expression}) AS {run_variable} FROM fp8scope.records "
            f"WHERE run = ${{{run_variable}:sqlstring}} AND {TENSOR_SQL} GROUP BY step ORDER BY step")


history = dashboard(
    "fp8scope-history", "fp8scope / history by step",
    "A run's loss and a tensor's FP8 statistics against the training step, beside its baseline's, read from the "
    "PostgreSQL history every node's fp8scoped writes.",
    [
        by_step("Loss", [sql(loss_sql("run"), "A"), sql(loss_sql("baseline"), "B")], 0, 0,
                "The run's and the baseline's loss by step (the lowest rank that logged it).", w=24),
        by_step("Statistic of the tensor",
                [sql(tensor_sql("run", statistic_column()), "A"), sql(tensor_sql("baseline", statistic_column()), "B")],
                0, 8, "The chosen statistic of the chosen tensor under the chosen recipe, by step, in the run and its "
                      "baseline (the worst rank per step)."),
        by_step("Scale against current scaling's",
                [sql(tensor_sql("run", "scale / NULLIF(scale_current, 0)"), "A")], 12, 8,
                "The scale the recipe used over the one current scaling would choose from this step's amax: "
                "1 is on time, above 1 delayed scaling's scale is too large for this step (overflow), below 1 too "
                "small (underflow). Pick tensor_delayed.", log_axis=True),
        by_step("GEMM output cosine similarity",
                [sql("SELECT step, MIN(cosine) AS run FROM fp8scope.gemm_outputs WHERE run = ${run:sqlstring} "
                     "AND layer = ${layer:sqlstring} GROUP BY step ORDER BY step", "A"),
                 sql("SELECT step, MIN(cosine) AS baseline FROM fp8scope.gemm_outputs WHERE run = "
                     "${baseline:sqlstring} AND layer = ${layer:sqlstring} GROUP BY step ORDER BY step", "B")],
                0, 16, "The daemon's GEMM check of the layer: the FP8 GEMM's output against the high-precision "
                       "one, by step (the worst accumulation mode and rank)."),
        dict(panel("Tensors of the run, worst first", "table",
                   [sql("SELECT layer, gemm, operand, MAX(stat_underflow_ratio) AS underflow, "
                        "MAX(stat_overflow_ratio) AS overflow, MIN(stat_cosine) AS cosine, MAX(stat_mse) AS mse, "
                        "COUNT(DISTINCT step) AS steps FROM fp8scope.records WHERE run = ${run:sqlstring} "
                        "AND recipe = ${recipe:sqlstring} GROUP BY layer, gemm, operand "
                        "ORDER BY MAX(stat_underflow_ratio) + MAX(stat_overflow_ratio) DESC NULLS LAST, MIN(stat_cosine) LIMIT 50")],
                   12, 16, description="Every tensor of the run under the chosen recipe with its worst underflow, "
                                       "overflow, cosine and MSE over the run, worst first."),
             datasource=PG),
    ],
    [sql_variable("run", "SELECT DISTINCT run FROM fp8scope.records ORDER BY 1"),
     sql_variable("baseline", "SELECT DISTINCT run FROM fp8scope.scalars ORDER BY 1"),
     custom_variable("loss", ["loss"]),
     sql_variable("layer", "SELECT DISTINCT layer FROM fp8scope.records WHERE run = ${run:sqlstring} ORDER BY 1"),
     custom_variable("gemm", ["fprop", "dgrad", "wgrad", "unknown"]),
     custom_variable("operand", ["x", "w", "dy", "out"]),
     sql_variable("recipe", "SELECT DISTINCT recipe FROM fp8scope.records WHERE run = ${run:sqlstring} ORDER BY 1"),
     custom_variable("statistic", STATISTICS)])
history["time"] = {"from": "now-30d", "to": "now"}
history["refresh"] = ""
HISTORY_DASHBOARDS = {"fp8scope-history.json": history}


def main():
    check = "--check" in sys.argv
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(HISTORY_OUT, exist_ok=True)
    stale = []
    boards = [(os.path.join(OUT, n), b) for n, b in DASHBOARDS.items()]
    boards += [(os.path.join(HISTORY_OUT, n), b) for n, b in HISTORY_DASHBOARDS.items()]
    for path, board in boards:
        text = json.dumps(board, indent=2, sort_keys=False) + "\n"
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

"""A one-screen text summary of a results.json, for the terminal."""

import logging
from pathlib import Path
from typing import Any

from contract import results

log = logging.getLogger(__name__)


def announce(doc: dict[str, Any]) -> None:
    """The last lines of every launcher's run: the summary, then where its results.json is."""
    log.info("%s\nresults: %s", format_result(doc), Path(doc["config"]["output_dir"]) / results.FILENAME)


def format_result(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    lines = [
        f"{doc['backend']} via {doc['launcher']}: {doc['workers']} worker(s)"
        + (", no gradient averaging (the ceiling)" if doc["config"].get("no_averaging") else "")
        + f", dataset {doc['dataset']}, "
        f"batch {doc['config']['batch_size']}/worker, lr {doc['config']['lr']}" + _model(doc),
        f"{'epoch':>5} {'train loss':>10} {'test loss':>9} {'test acc':>8} {'samples/s':>10} "
        f"{'step p50':>9} {'step p95':>9} {'comm':>6} {'epoch s':>8}",
    ]
    for e in doc["epochs"]:
        lines.append(
            f"{e['epoch']:>5} {e['train_loss']:>10.4f} {e['test_loss']:>9.4f} {100 * e['test_accuracy']:>7.2f}% "
            f"{e['samples_per_s']:>10.0f} {1000 * e['step_time_p50_s']:>7.1f}ms {1000 * e['step_time_p95_s']:>7.1f}ms "
            f"{100 * e['comm_share']:>5.1f}% {e['epoch_time_s']:>8.1f}"
        )
    final = doc["final"]
    if (doc.get("model") or {}).get("batch_norm") and doc["workers"] > 1:
        lines.append("test loss and accuracy use BatchNorm's running statistics, which each backend keeps its own way "
                     "in training (averaged across the ranks before each evaluation): they may differ between the "
                     "backends while the parameters agree (docs/measuring.md, \"BatchNorm buffers\")")
    lines.append(
        f"final test accuracy {100 * final['test_accuracy']:.2f}%, training wall time {final['wall_time_s']:.1f} s; "
        f"torch {env['torch']}, ray {env['ray']}, horovod {env['horovod']}, {env['cpu']}"
        + (f", {env['gpu']}" if env["gpu"] else "")
    )
    return "\n".join(lines)


def _model(doc: dict[str, Any]) -> str:
    model = doc.get("model")
    if not model:
        return ""
    gradient = model["gradient_bytes"]  # a user's small network is kilobytes: 0.0 MB would say it has none
    said = f"{gradient / 1e6:.1f} MB" if gradient >= 1e5 else f"{gradient / 1e3:.1f} kB"
    return f", model {model['name']} ({model['parameters'] / 1e6:.2f} M parameters, {said} of gradient)"

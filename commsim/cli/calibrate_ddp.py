"""`commsim calibrate --ddp-fit REPORT.json [REPORT.json ...] -o DDP.yaml`: DDP's own costs from DDP validation runs.

Reads ``commsim validate --mode ddp --json`` reports of one job at two or more bucket caps,
fits ``ddp.bucket_overhead`` (and ``ddp.overlap_slowdown`` where the runs determine it) with
:func:`commsim.analysis.ddp_fit.fit_ddp_costs`, and writes the fitted keys as a scenario
``ddp:`` fragment to ``-o``. A report that is not one, or runs that cannot determine the
constant, is one line on stderr and exit 2.
"""

from __future__ import annotations

import json
from typing import Sequence

from commsim.cli.common import fail
from commsim.cli.jobs import command_line
from commsim.cli.outputs import check_outputs, echo_to, quiet_echo, write_output
from commsim.errors import InputError
from commsim.yamlio import read_text_file


def ddp_fit_command(reports: Sequence[str], output: str, other_source: bool, quiet: bool = False) -> None:
    """The whole `--ddp-fit` branch of `commsim calibrate`: `reports` are its arguments
    (`other_source`: --from-nccl-tests or --backend was given too, which a DDP fit does not read;
    `quiet`: print nothing but errors)."""
    from commsim.analysis.ddp_fit import fit_ddp_costs, fit_lines, fit_yaml, run_from_report

    if other_source:
        fail("--ddp-fit fits DDP's costs from validate --mode ddp reports: give no --from-nccl-tests or --backend with it")
    if not reports:
        fail("--ddp-fit: no report given (expected REPORT.json [REPORT.json ...] from validate --mode ddp --json)")
    stdout_taken = check_outputs({"-o": output}, {"report": list(reports)})  # the fragment would replace a report
    echo = quiet_echo if quiet else echo_to(stdout_taken)
    runs = []
    for path in reports:
        try:
            # the strict reader: regular files only, size-capped (a FIFO or /dev/zero is refused)
            text = read_text_file(path, "a validate --mode ddp --json report")
            doc = json.loads(text)
        except ValueError as exc:
            fail(f"{path}: not JSON ({exc})")
        except RecursionError:  # json's recursive decoder: arrays or objects nested thousands deep
            fail(f"{path}: not JSON as validate writes it (nested too deeply)")
        except InputError as exc:
            fail(str(exc))
        try:
            runs.append(run_from_report(doc, path))
        except InputError as exc:
            fail(str(exc))
    try:
        fit = fit_ddp_costs(runs)
    except InputError as exc:
        fail(str(exc))
    write_output(output, fit_yaml(fit, command_line()), "the DDP cost fit")
    for line in fit_lines(fit) + ([] if stdout_taken else [f"wrote {output}"]):
        echo(line)

"""``lrbandit reproduce``: the paper's simulation studies from one command.

:mod:`.run` runs a study; :mod:`.outputs` the files it writes, :mod:`.tables` what it
reports beside :mod:`.paper_numbers`, the paper's, :mod:`.sequence_figures` the figures of
its confidence sequences, :mod:`.timing` how it is timed.
"""

from lrbandit_gym.experiments.reproduce.outputs import (
    FIGURE_KINDS,
    figure_prefix,
    load_raw,
    output_patterns,
    redraw_figures,
    run_versions,
    save_raw,
    write_figures,
)
from lrbandit_gym.experiments.reproduce.paper_numbers import (
    PAPER,
    PAPER_ENSEMBLE,
    PAPER_TABLE2,
    paper_references,
)
from lrbandit_gym.experiments.reproduce.run import (
    STUDIES,
    STUDY_DEFAULTS,
    TABLE2_RANKS,
    StudyRun,
    reproduce,
    run_settings,
    study_configs,
    write_outputs,
)
from lrbandit_gym.experiments.reproduce.sequence_figures import (
    sequence_figure,
    uniform_figure,
    uniform_figures,
)
from lrbandit_gym.experiments.reproduce.tables import (
    print_ensemble,
    print_table,
    print_uniform,
    study_diagnostics,
    study_rows,
)
from lrbandit_gym.experiments.reproduce.timing import (
    draw_baseline,
    phase_breakdown,
    phase_line,
    run_timed_setting,
    study_rounds,
)

__all__ = [
    "FIGURE_KINDS",
    "PAPER",
    "PAPER_ENSEMBLE",
    "PAPER_TABLE2",
    "STUDIES",
    "STUDY_DEFAULTS",
    "StudyRun",
    "TABLE2_RANKS",
    "draw_baseline",
    "figure_prefix",
    "load_raw",
    "output_patterns",
    "paper_references",
    "phase_breakdown",
    "phase_line",
    "print_ensemble",
    "print_table",
    "print_uniform",
    "redraw_figures",
    "reproduce",
    "run_settings",
    "run_timed_setting",
    "run_versions",
    "save_raw",
    "sequence_figure",
    "study_configs",
    "study_diagnostics",
    "study_rounds",
    "study_rows",
    "uniform_figure",
    "uniform_figures",
    "write_figures",
    "write_outputs",
]

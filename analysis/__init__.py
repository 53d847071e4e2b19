"""Driver-side analysis: JSON in, Markdown and PNG out (statistics, speed, parity, reports, plots). Imports no torch."""

"""The failure predictor's shell: CLI commands, file and store readers, live scoring, the HTML report and
simulated history. The models, ensembles, sliding training, metrics, backtest and SQL live in `predictor/`."""

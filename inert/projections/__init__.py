"""Pure folds of the log: ledger, dispatch queue, status, controls and audit."""

"""Fleet ledger, analysis stage: the fold of each GPU's history into the ledger."""

-- Erasure removes an erased run's interactions.
GRANT DELETE ON forge_interactions TO forge_tenant;

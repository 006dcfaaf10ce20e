DROP FUNCTION forge_write_steps(
    text, int[], bigint[], bigint[], text[], text[], jsonb[], jsonb[], timestamptz[], uuid[],
    boolean[], boolean[], boolean[], bigint[], bigint[], text[], boolean[],
    int[], bigint[], timestamptz[], text[],
    int[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    int[], uuid[], timestamptz[], timestamptz[], text[], jsonb[]);

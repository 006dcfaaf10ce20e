//! GraphQL documents the servers' tests attack with.

/// A document whose fragments each spread the next one twice: `2^depth` fields once expanded,
/// in a few hundred bytes (the "fragment bomb").
pub fn fragment_bomb(depth: usize) -> String {
    let mut q = String::from("query { ...F0 }\n");
    for i in 0..depth {
        q.push_str(&format!(
            "fragment F{i} on Query {{ ...F{} ...F{} }}\n",
            i + 1,
            i + 1
        ));
    }
    q.push_str(&format!(
        "fragment F{depth} on Query {{ agents {{ name }} }}\n"
    ));
    q
}

//! Writes the conformance vectors and their coverage table: `cargo xtask vectors`.

fn main() -> std::io::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "tests/vectors".into());
    let v = netdam_common::vectors::generate();
    std::fs::write(format!("{dir}/netdam.jsonl"), netdam_common::vectors::to_jsonl(&v))?;
    std::fs::write(format!("{dir}/README.md"), netdam_common::vectors::readme(&v))?;
    println!(
        "{} vectors written to {dir}/netdam.jsonl, their rules to {dir}/README.md",
        v.len()
    );
    Ok(())
}

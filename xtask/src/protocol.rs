//! `cargo xtask protocol`: docs/PROTOCOL.md is the wire contract with this
//! implementation's settled readings folded in as marked blocks, and its
//! version-2 section as one more marked block; without the blocks it must
//! equal, byte for byte, the copy beside the repository
//! (`../shared/PROTOCOL.md`), so that the two never drift apart silently.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

/// A kind of marked block: its name in messages, how its first line starts,
/// and its closing line.
struct Block {
    name: &'static str,
    open: &'static str,
    close: &'static str,
}

const READING: Block = Block {
    name: "reading",
    open: "<!-- reading",
    close: "<!-- /reading -->",
};
/// The version-2 section (issue 27): this project's design beyond version 1.
const VERSION_2: Block = Block {
    name: "version 2",
    open: "<!-- version 2 -->",
    close: "<!-- /version 2 -->",
};
const BLOCKS: [Block; 2] = [READING, VERSION_2];

/// The text of docs/PROTOCOL.md with every reading block and the version-2
/// block (each with the blank line that sets it off) taken away.
pub fn strip_readings(text: &str) -> Result<String, String> {
    let mut out: Vec<&str> = Vec::new();
    let mut lines = text.split('\n').enumerate();
    while let Some((n, line)) = lines.next() {
        let Some(block) = BLOCKS.iter().find(|b| line.starts_with(b.open)) else {
            if let Some(b) = BLOCKS.iter().find(|b| line.starts_with(b.close)) {
                return Err(format!("line {}: {} without a {} before it", n + 1, b.close, b.name));
            }
            out.push(line);
            continue;
        };
        if out.pop() != Some("") {
            return Err(format!(
                "line {}: a {} block must follow a blank line",
                n + 1,
                block.name
            ));
        }
        loop {
            match lines.next() {
                Some((_, l)) if l == block.close => break,
                Some((m, l)) if BLOCKS.iter().any(|b| l.starts_with(b.open)) => {
                    return Err(format!(
                        "line {}: a block opens inside the {} of line {}",
                        m + 1,
                        block.name,
                        n + 1
                    ))
                }
                Some(_) => {}
                None => {
                    return Err(format!(
                        "line {}: {} never closed with {}",
                        n + 1,
                        block.name,
                        block.close
                    ))
                }
            }
        }
    }
    Ok(out.join("\n"))
}

/// Where the original is: `NETDAM_PROTOCOL` if set, else `../shared/PROTOCOL.md`.
fn original(root: &Path) -> PathBuf {
    std::env::var_os("NETDAM_PROTOCOL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/PROTOCOL.md"))
}

/// The first line where `copy` (stripped) and `original` differ, as a message.
fn first_difference(copy: &str, original: &str) -> Option<String> {
    let (a, b): (Vec<_>, Vec<_>) = (copy.split('\n').collect(), original.split('\n').collect());
    (0..a.len().max(b.len())).find_map(|i| {
        let (x, y) = (a.get(i), b.get(i));
        (x != y).then(|| {
            format!(
                "line {} of the original (readings removed) differs:\n  docs/PROTOCOL.md: {}\n  original:         {}",
                i + 1,
                x.map_or("<end of file>".into(), |s| format!("{s:?}")),
                y.map_or("<end of file>".into(), |s| format!("{s:?}")),
            )
        })
    })
}

/// Checks docs/PROTOCOL.md against the original. A missing original is not an
/// error (a clone on its own has none) but is said plainly.
pub fn check(root: &Path) -> Result<()> {
    let copy_path = root.join("docs/PROTOCOL.md");
    let copy = std::fs::read_to_string(&copy_path).with_context(|| format!("reading {}", copy_path.display()))?;
    let stripped = strip_readings(&copy).map_err(|e| anyhow::anyhow!("{}: {e}", copy_path.display()))?;
    let orig_path = original(root);
    let orig = match std::fs::read_to_string(&orig_path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!(
                "protocol check skipped: {} not found (set NETDAM_PROTOCOL to the original PROTOCOL.md)",
                orig_path.display()
            );
            return Ok(());
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", orig_path.display())),
    };
    if let Some(diff) = first_difference(&stripped, &orig) {
        bail!(
            "docs/PROTOCOL.md is not the wire contract {}: {diff}\n\
             Bring the original's change into docs/PROTOCOL.md (outside the reading blocks), \
             and check the readings around it still hold.",
            orig_path.display()
        );
    }
    let readings = copy.lines().filter(|l| l.starts_with(READING.open)).count();
    let v2 = match copy.lines().any(|l| l == VERSION_2.open) {
        true => " and the version-2 section",
        false => "",
    };
    println!(
        "protocol check ok: docs/PROTOCOL.md is {} with {readings} reading blocks{v2}",
        orig_path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_come_out_with_their_blank_line() {
        let copy = "a\n\n<!-- reading: x -->\n> r\n<!-- /reading -->\nb\n";
        assert_eq!(strip_readings(copy).unwrap(), "a\nb\n");
    }

    #[test]
    fn malformed_blocks_are_named_by_line() {
        assert_eq!(
            strip_readings("a\n\n<!-- reading -->\n> r\n").unwrap_err(),
            "line 3: reading never closed with <!-- /reading -->"
        );
        assert_eq!(
            strip_readings("a\n<!-- reading -->\n<!-- /reading -->").unwrap_err(),
            "line 2: a reading block must follow a blank line"
        );
        assert_eq!(
            strip_readings("a\n<!-- /reading -->").unwrap_err(),
            "line 2: <!-- /reading --> without a reading before it"
        );
        assert_eq!(
            strip_readings("a\n\n<!-- version 2 -->\n<!-- reading -->\n").unwrap_err(),
            "line 4: a block opens inside the version 2 of line 3"
        );
    }

    #[test]
    fn the_version_2_section_comes_out_too() {
        let copy = "a\n\n<!-- version 2 -->\n## v2\n<!-- /version 2 -->\n";
        assert_eq!(strip_readings(copy).unwrap(), "a\n");
    }

    #[test]
    fn a_changed_word_is_found() {
        let d = first_difference("x\ny\n", "x\nz\n").unwrap();
        assert!(d.starts_with("line 2 of"), "{d}");
        assert!(first_difference("x\n", "x\n").is_none());
        assert!(first_difference("x", "x\ny").unwrap().contains("<end of file>"));
    }

    /// The committed copy itself: well-formed, and equal to the original when
    /// the original is beside the repository.
    #[test]
    fn the_committed_copy_strips_cleanly() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let copy = std::fs::read_to_string(root.join("docs/PROTOCOL.md")).unwrap();
        let stripped = strip_readings(&copy).unwrap();
        assert!(stripped.starts_with("# NetDAM-XDP wire protocol"));
        if let Ok(orig) = std::fs::read_to_string(original(&root)) {
            assert_eq!(first_difference(&stripped, &orig), None);
        }
    }
}

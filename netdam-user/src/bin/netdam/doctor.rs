//! `netdam doctor`: the checks `serve` runs before it attaches, as a table or JSON.

use anyhow::{bail, Result};
use clap::Args;
use netdam_user::{controller::AttachMode, doctor};

use crate::local::PinDirArgs;

#[derive(Args)]
#[command(
    after_help = "Each line is ok, warn or fail, the check's name and what it found; a warn or fail \
    has the command that fixes it on the next line. Exit code 0 when nothing fails, 1 when a check fails. \
    `serve` runs the same checks before it attaches: it refuses to serve on a fail (--skip-check NAME \
    overrides) and logs the warnings. docs/doctor.md lists every check."
)]
pub(crate) struct DoctorArgs {
    /// The interface `serve` would attach to [default: check the host only].
    #[arg(long)]
    iface: Option<String>,
    /// The XDP attach mode `serve` would use (native, skb or auto).
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    mode: AttachMode,
    /// Print the checks as JSON ({"ok": bool, "checks": [{name, level, found, fix}]}).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pins: PinDirArgs,
}

/// `netdam doctor`: the table (or JSON); exit code 1 when a check fails.
pub(crate) fn doctor(a: DoctorArgs) -> Result<()> {
    let checks = doctor::run(&doctor::Options {
        iface: a.iface,
        pin_dir: a.pins.pin_dir,
        mode: a.mode,
    });
    let ok = doctor::worst(&checks) < doctor::Level::Fail;
    if a.json {
        println!("{}", serde_json::json!({ "ok": ok, "checks": checks }));
    } else {
        print!("{}", doctor::table(&checks));
    }
    if !ok {
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| c.level == doctor::Level::Fail)
            .map(|c| c.name)
            .collect();
        bail!("doctor: {} failed", failed.join(", "));
    }
    Ok(())
}

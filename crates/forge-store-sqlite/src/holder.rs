//! Names of lease and claim holders that say which process holds them, so that a store on one
//! host (SQLite) can tell a dead holder from a slow one and take over at once instead of waiting
//! out its lease. A name is `{role}-{pid}@{host}#{start}`: the process id, the host name and the
//! process's start time (in clock ticks since boot), which together survive pid reuse.
//!
//! Only Linux's `/proc` is read; elsewhere, and for names of another form or another host,
//! [`is_dead_here`] answers `false`: a holder is presumed alive unless it is known dead.

/// The holder name of this process, for example `worker-4242@db1#1234567`.
pub fn this_process(role: &str) -> String {
    let pid = std::process::id();
    match (host(), start_time(pid)) {
        (Some(host), Some(start)) => format!("{role}-{pid}@{host}#{start}"),
        _ => format!("{role}-{pid}"),
    }
}

/// Whether `holder` names a process of this host that is no longer running (its pid is gone, or
/// now belongs to a process started at another time). `false` whenever it cannot know.
pub fn is_dead_here(holder: &str) -> bool {
    let Some((rest, start)) = holder.rsplit_once('#') else {
        return false;
    };
    let Some((rest, host_name)) = rest.rsplit_once('@') else {
        return false;
    };
    let Some((_, pid)) = rest.rsplit_once('-') else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    if host().as_deref() != Some(host_name) || !std::path::Path::new("/proc/self").exists() {
        return false;
    }
    start_time(pid) != Some(start)
}

fn host() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && !h.contains(['@', '#']))
}

/// Field 22 of `/proc/{pid}/stat` (counted after the parenthesised command name, which may
/// itself hold spaces and parentheses).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_gone_one_is_dead() {
        let me = this_process("worker");
        assert!(
            me.starts_with(&format!("worker-{}@", std::process::id())),
            "{me}"
        );
        assert!(!is_dead_here(&me), "{me}");
        // The same pid with another start time: a reused pid, so the named holder is gone.
        let (rest, start) = me.rsplit_once('#').unwrap_or((&me, "0"));
        let other = format!("{rest}#{}", start.parse::<u64>().unwrap_or(0) + 1);
        assert!(is_dead_here(&other), "{other}");
    }

    #[test]
    fn a_finished_child_is_dead() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        // Unreaped, it is still in /proc: read its start time, then reap it.
        let start = start_time(pid).expect("a child is in /proc until reaped");
        let name = format!("worker-{pid}@{}#{start}", host().expect("a host name"));
        assert!(!is_dead_here(&name), "not yet reaped");
        child.wait().expect("wait");
        assert!(is_dead_here(&name), "{name}");
    }

    #[test]
    fn unknown_forms_and_other_hosts_are_presumed_alive() {
        assert!(!is_dead_here("worker-1"));
        assert!(!is_dead_here("forge-dlq"));
        assert!(!is_dead_here("worker-1@some-other-host#5"));
        assert!(!is_dead_here("worker-x@h#y"));
    }
}

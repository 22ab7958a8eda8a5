//! Mutual exclusion checked from the outside: every process records each critical section
//! it ran as `[enter, exit]` on the machine's monotonic clock, and [`Report`] merges the
//! records of all processes and counts the sections that overlapped and the ones that are
//! missing.
//!
//! Clients in separate OS processes share nothing but Redis and the kernel, so timestamps
//! from one clock (`CLOCK_MONOTONIC`, the same for every process on a machine) are the only
//! evidence that cannot be fooled by a bug in the lock: if two recorded sections intersect,
//! two holders were inside at once.
//!
//! A record is one text line, `<process> <seq> <enter_ns> <exit_ns>`:
//!
//! ```
//! use dlock_tests::overlap::{parse, Report};
//!
//! let a = parse("p1.txt", "1 0 100 200\n1 1 300 400\n").unwrap();
//! let b = parse("p2.txt", "2 0 150 250\n2 1 500 600\n").unwrap();
//! let report = Report::new(&[a, b].concat(), 4);
//! assert_eq!(report.overlaps, 1); // 2#0 entered at 150, while 1#0 was inside until 200
//! assert_eq!(report.lost, 0);
//! assert!(!report.is_clean());
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// One critical section as a process ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// The process that ran it (its `--process` id).
    pub process: u32,
    /// Its position in that process's run, from 0.
    pub seq: u64,
    /// Monotonic clock when the section began, in nanoseconds.
    pub enter_ns: u64,
    /// Monotonic clock when the section ended, in nanoseconds; not before `enter_ns`.
    pub exit_ns: u64,
}

/// The record format: one line, `<process> <seq> <enter_ns> <exit_ns>`, without a newline.
impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {}",
            self.process, self.seq, self.enter_ns, self.exit_ns
        )
    }
}

/// A record file that could not be read or has a line that is not a record.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be read.
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a valid record.
    Malformed {
        /// The file (or name) the text came from.
        file: String,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io { path, source } => write!(f, "{path}: {source}"),
            ReadError::Malformed {
                file,
                line,
                message,
            } => write!(f, "{file}:{line}: {message}"),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io { source, .. } => Some(source),
            ReadError::Malformed { .. } => None,
        }
    }
}

const FIELDS: [&str; 4] = ["process", "seq", "enter_ns", "exit_ns"];

/// The records in `text`, which came from `file` (used in error messages). Blank lines are
/// skipped, since a record file may end with one.
///
/// # Errors
///
/// [`ReadError::Malformed`] with the file and line of the first line that does not have
/// exactly four unsigned integers, or whose exit is before its enter.
pub fn parse(file: &str, text: &str) -> Result<Vec<Section>, ReadError> {
    let mut sections = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |message: String| ReadError::Malformed {
            file: file.to_owned(),
            line: index + 1,
            message,
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() != FIELDS.len() {
            return Err(malformed(format!(
                "expected 4 fields `<process> <seq> <enter_ns> <exit_ns>`, found {}: {line:?}",
                words.len()
            )));
        }
        let mut numbers = [0u64; 4];
        for ((number, word), name) in numbers.iter_mut().zip(&words).zip(FIELDS) {
            *number = word.parse().map_err(|_| {
                malformed(format!(
                    "`{name}` must be an unsigned integer, got {word:?}"
                ))
            })?;
        }
        let [process, seq, enter_ns, exit_ns] = numbers;
        let process = u32::try_from(process)
            .map_err(|_| malformed(format!("`process` {process} does not fit in 32 bits")))?;
        if exit_ns < enter_ns {
            return Err(malformed(format!(
                "`exit_ns` {exit_ns} is before `enter_ns` {enter_ns}"
            )));
        }
        sections.push(Section {
            process,
            seq,
            enter_ns,
            exit_ns,
        });
    }
    Ok(sections)
}

/// The records of every file in `paths`, in file order.
///
/// # Errors
///
/// The first file that cannot be read or holds a malformed line (see [`parse`]).
pub fn read_files<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<Section>, ReadError> {
    let mut sections = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ReadError::Io {
            path: name.clone(),
            source,
        })?;
        sections.extend(parse(&name, &text)?);
    }
    Ok(sections)
}

/// Two sections that were running at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap {
    /// The section that entered first and was still inside.
    pub earlier: Section,
    /// The section that entered while `earlier` was inside.
    pub later: Section,
    /// How long both were inside, in nanoseconds.
    pub ns: u64,
}

/// What the merged records of one run show.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Distinct processes that recorded at least one section.
    pub processes: usize,
    /// Sections the run should have recorded.
    pub expected: u64,
    /// Records found, duplicates included.
    pub recorded: u64,
    /// Records repeating a `(process, seq)` already seen: a process counted wrong.
    pub duplicates: u64,
    /// Sequence numbers a process skipped below its highest one: acquisitions that failed
    /// in the middle of a run (failures at the end show only in `lost`).
    pub missing: u64,
    /// Expected sections without a record: `expected` minus the distinct records.
    pub lost: u64,
    /// Distinct records beyond `expected`: the expectation was wrong.
    pub extra: u64,
    /// Sections that entered before every earlier-entered section had exited.
    pub overlaps: u64,
    /// The overlap that lasted longest.
    pub worst: Option<Overlap>,
    /// From the first enter to the last exit.
    pub span: Duration,
}

impl Report {
    /// Merges `sections` (in any order, from any number of processes) of a run that
    /// should have recorded `expected` of them.
    pub fn new(sections: &[Section], expected: u64) -> Report {
        let recorded = sections.len() as u64;

        let mut seqs: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        let mut duplicates = 0;
        for section in sections {
            if !seqs.entry(section.process).or_default().insert(section.seq) {
                duplicates += 1;
            }
        }
        let distinct = recorded - duplicates;
        let missing = seqs
            .values()
            .map(|seen| seen.last().map_or(0, |last| last + 1) - seen.len() as u64)
            .sum();

        let mut ordered = sections.to_vec();
        ordered.sort_by_key(|s| (s.enter_ns, s.exit_ns, s.process, s.seq));
        let mut overlaps = 0;
        let mut worst: Option<Overlap> = None;
        // The earlier-entered section that exits last: any later enter before its exit is
        // inside it, even when sections in between have long ended.
        let mut latest: Option<Section> = None;
        for &section in &ordered {
            match latest {
                Some(earlier) if section.enter_ns < earlier.exit_ns => {
                    overlaps += 1;
                    let ns = earlier.exit_ns.min(section.exit_ns) - section.enter_ns;
                    if worst.is_none_or(|w| ns > w.ns) {
                        worst = Some(Overlap {
                            earlier,
                            later: section,
                            ns,
                        });
                    }
                    if section.exit_ns > earlier.exit_ns {
                        latest = Some(section);
                    }
                }
                _ => latest = Some(section),
            }
        }

        let span = match (ordered.first(), ordered.iter().map(|s| s.exit_ns).max()) {
            (Some(first), Some(last)) => Duration::from_nanos(last - first.enter_ns),
            _ => Duration::ZERO,
        };
        Report {
            processes: seqs.len(),
            expected,
            recorded,
            duplicates,
            missing,
            lost: expected.saturating_sub(distinct),
            extra: distinct.saturating_sub(expected),
            overlaps,
            worst,
            span,
        }
    }

    /// Every expected section recorded exactly once, and none overlapped.
    pub fn is_clean(&self) -> bool {
        self.overlaps == 0
            && self.lost == 0
            && self.extra == 0
            && self.duplicates == 0
            && self.missing == 0
    }

    /// Recorded sections per second of [`span`](Report::span); 0 for an empty run.
    pub fn throughput(&self) -> f64 {
        if self.span.is_zero() {
            0.0
        } else {
            self.recorded as f64 / self.span.as_secs_f64()
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sections: {} recorded by {} processes, {} expected: {} lost, {} duplicate, {} missing seq, {} extra",
            self.recorded,
            self.processes,
            self.expected,
            self.lost,
            self.duplicates,
            self.missing,
            self.extra
        )?;
        write!(f, "overlaps: {}", self.overlaps)?;
        if let Some(worst) = &self.worst {
            write!(
                f,
                " (worst {:?}: process {} #{} entered while process {} #{} was inside)",
                Duration::from_nanos(worst.ns),
                worst.later.process,
                worst.later.seq,
                worst.earlier.process,
                worst.earlier.seq
            )?;
        }
        writeln!(f)?;
        write!(
            f,
            "span: {:?}, {:.0} sections/s",
            self.span,
            self.throughput()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(process: u32, seq: u64, enter_ns: u64, exit_ns: u64) -> Section {
        Section {
            process,
            seq,
            enter_ns,
            exit_ns,
        }
    }

    #[test]
    fn back_to_back_sections_do_not_overlap() {
        // Given out of order, and one entering exactly when another exits.
        let sections = [
            section(2, 0, 100, 200),
            section(1, 0, 0, 100),
            section(1, 1, 250, 300),
            section(2, 1, 300, 400),
        ];
        let report = Report::new(&sections, 4);
        assert_eq!(report.overlaps, 0);
        assert_eq!(report.worst, None);
        assert_eq!(report.lost, 0);
        assert_eq!(report.processes, 2);
        assert_eq!(report.span, Duration::from_nanos(400));
        assert!(report.is_clean(), "{report}");
    }

    #[test]
    fn a_section_nested_in_another_overlaps() {
        let sections = [section(1, 0, 0, 100), section(2, 0, 10, 20)];
        let report = Report::new(&sections, 2);
        assert_eq!(report.overlaps, 1);
        assert_eq!(
            report.worst,
            Some(Overlap {
                earlier: sections[0],
                later: sections[1],
                ns: 10
            })
        );
        assert!(!report.is_clean());
    }

    #[test]
    fn an_overlap_behind_a_long_earlier_section_counts() {
        // 2#0 ends before 3#0 enters, but 1#0 is still inside: comparing each section
        // with the previous one only would miss it.
        let sections = [
            section(1, 0, 0, 1_000),
            section(2, 0, 100, 200),
            section(3, 0, 300, 400),
            section(2, 1, 1_000, 1_100),
        ];
        let report = Report::new(&sections, 4);
        assert_eq!(report.overlaps, 2);
        assert_eq!(report.worst.map(|w| w.ns), Some(100));
    }

    #[test]
    fn the_worst_overlap_is_the_longest_shared_time() {
        let sections = [
            section(1, 0, 0, 100),
            section(2, 0, 90, 500),
            section(3, 0, 200, 450),
        ];
        let report = Report::new(&sections, 3);
        assert_eq!(report.overlaps, 2);
        let worst = report.worst.unwrap();
        assert_eq!(
            (worst.earlier, worst.later, worst.ns),
            (sections[1], sections[2], 250)
        );
        assert!(report
            .to_string()
            .contains("process 3 #0 entered while process 2 #0"));
    }

    #[test]
    fn missing_sections_are_lost() {
        // Process 1 failed its seq 1 (a gap) and process 2 its last one (no gap to see).
        let sections = [
            section(1, 0, 0, 10),
            section(1, 2, 20, 30),
            section(2, 0, 40, 50),
            section(2, 1, 60, 70),
        ];
        let report = Report::new(&sections, 6);
        assert_eq!(report.lost, 2);
        assert_eq!(report.missing, 1);
        assert_eq!(report.overlaps, 0);
        assert!(!report.is_clean());
        assert!(report.to_string().contains("2 lost"), "{report}");
    }

    #[test]
    fn duplicates_do_not_hide_lost_sections() {
        let sections = [section(1, 0, 0, 10), section(1, 0, 20, 30)];
        let report = Report::new(&sections, 2);
        assert_eq!(report.recorded, 2);
        assert_eq!(report.duplicates, 1);
        assert_eq!(report.lost, 1);
        assert!(!report.is_clean());
    }

    #[test]
    fn more_sections_than_expected_is_not_clean() {
        let report = Report::new(&[section(1, 0, 0, 10), section(1, 1, 20, 30)], 1);
        assert_eq!((report.extra, report.lost), (1, 0));
        assert!(!report.is_clean());
    }

    #[test]
    fn an_empty_run_loses_everything() {
        let report = Report::new(&[], 3);
        assert_eq!((report.lost, report.overlaps, report.processes), (3, 0, 0));
        assert_eq!(report.span, Duration::ZERO);
        assert_eq!(report.throughput(), 0.0);
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let written = section(7, 3, 1_000_000_123, 1_001_000_456);
        let text = format!("{written}\n\n");
        assert_eq!(parse("p7.txt", &text).unwrap(), [written]);
    }

    #[test]
    fn a_malformed_line_names_file_and_line() {
        let cases = [
            ("1 0 5 9\n1 1 12\n", "p.txt:2: expected 4 fields `<process> <seq> <enter_ns> <exit_ns>`, found 3: \"1 1 12\""),
            ("1 0 5 x\n", "p.txt:1: `exit_ns` must be an unsigned integer, got \"x\""),
            ("1 -1 5 9\n", "p.txt:1: `seq` must be an unsigned integer, got \"-1\""),
            ("\n1 0 9 5\n", "p.txt:2: `exit_ns` 5 is before `enter_ns` 9"),
            ("4294967296 0 5 9\n", "p.txt:1: `process` 4294967296 does not fit in 32 bits"),
        ];
        for (text, message) in cases {
            let err = parse("p.txt", text).unwrap_err();
            assert!(matches!(err, ReadError::Malformed { .. }), "{err:?}");
            assert_eq!(err.to_string(), message);
        }
    }

    #[test]
    fn an_unreadable_file_is_an_error() {
        let err = read_files(&["/nonexistent/dlock-overlap.txt"]).unwrap_err();
        assert!(matches!(err, ReadError::Io { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("/nonexistent/dlock-overlap.txt: "),
            "{err}"
        );
    }

    #[test]
    fn files_are_merged() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
        std::fs::write(&a, "1 0 0 100\n").unwrap();
        std::fs::write(&b, "2 0 50 150\n").unwrap();
        let sections = read_files(&[a, b]).unwrap();
        assert_eq!(sections.len(), 2);
        assert_eq!(Report::new(&sections, 2).overlaps, 1);
    }
}

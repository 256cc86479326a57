//! Where a durable instance is, and how that is written out and read back.
//!
//! While a durable instance runs, every composite activity keeps a [`Cur`] (cursor) up to
//! date: which child of a sequence runs, which branches of a flow are done, the frame of each
//! scope, the due time of each timer. When every running branch of the instance is parked at
//! a wait point, the cursors form a consistent picture that [`capture`] turns into a
//! [`Saved`] tree; the runtime writes it, with the instance's keys and open exchanges, as
//! JSON ([`Snapshot::to_json`]). On resume the runtime walks the same activities with the
//! saved tree: a sequence starts at its saved child, a scope restores its frame instead of
//! initialising one, a receive registers again, a wait sleeps until its saved due time.
//! Activities that ran after the last snapshot run again.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value as Json};

use crate::runtime::Fault;
use crate::xml::{Doc, Name, NodeId};

/// A running activity's position (kept only for durable instances).
#[derive(Debug)]
pub(crate) struct Cur(Mutex<At>);

impl Cur {
    pub fn new() -> Arc<Cur> {
        Arc::new(Cur(Mutex::new(At::Run)))
    }

    pub fn set(&self, at: At) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    /// Runs `f` on the position.
    pub fn with<R>(&self, f: impl FnOnce(&mut At) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A frame's contents, shared with the running scope.
pub(crate) type FrameData = (
    Vec<Option<Arc<Doc>>>,
    Vec<Option<Vec<String>>>,
    Option<Fault>,
);

/// Something that can give its frame's contents (the runtime's frames).
pub(crate) trait FrameView: Send + Sync + std::fmt::Debug {
    fn data(&self) -> FrameData;
}

/// Where an activity is.
#[derive(Debug)]
pub(crate) enum At {
    /// Running (or not begun): not a place to save.
    Run,
    /// Finished (a flow's or forEach's branch).
    Done,
    /// Parked in a receive.
    Receive,
    /// Calling a partner (resumes by calling it again).
    Invoke,
    /// Parked in a wait until the time given (ms since the Unix epoch).
    Wait(i64),
    /// A pick: parked (alarms' due times), or running the chosen handler.
    Pick {
        alarms: Vec<i64>,
        chosen: Option<(usize, Arc<Cur>)>,
    },
    Seq(usize, Arc<Cur>),
    Flow(Vec<Arc<Cur>>),
    /// A while or repeatUntil running its body.
    Loop(Arc<Cur>),
    /// An if running branch `.0` (the else: the number of conditions).
    If(usize, Arc<Cur>),
    /// A forEach: the last counter value, branches done, branches wanted (its completion
    /// condition), running branches.
    Each {
        end: u64,
        done: u64,
        wanted: Option<u64>,
        branches: Vec<(u64, Arc<Cur>)>,
    },
    Scope {
        frame: Arc<dyn FrameView>,
        body: Arc<Cur>,
        /// The handler running: its catch (`None`: catchAll), frame and position.
        handler: Option<Handler>,
    },
}

/// A scope's fault handler that runs: its catch (`None`: catchAll), frame and position.
pub(crate) type Handler = (Option<usize>, Arc<dyn FrameView>, Arc<Cur>);

/// A frame as saved.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SavedFrame {
    pub vars: Vec<Option<Arc<Doc>>>,
    pub corrs: Vec<Option<Vec<String>>>,
    pub fault: Option<Fault>,
}

/// A saved position, the same shape as [`At`] with frames as values.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Saved {
    Done,
    Receive,
    Invoke,
    Wait(i64),
    Pick {
        alarms: Vec<i64>,
        chosen: Option<(usize, Box<Saved>)>,
    },
    Seq(usize, Box<Saved>),
    Flow(Vec<Saved>),
    Loop(Box<Saved>),
    If(usize, Box<Saved>),
    Each {
        end: u64,
        done: u64,
        wanted: Option<u64>,
        branches: Vec<(u64, Saved)>,
    },
    Scope(Box<SavedScope>),
}

/// A scope as saved.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SavedScope {
    pub frame: SavedFrame,
    pub body: Saved,
    pub handler: Option<(Option<usize>, SavedFrame, Saved)>,
}

/// The position under `cur`, or `None` when some branch is running (not at a wait point).
pub(crate) fn capture(cur: &Cur) -> Option<Saved> {
    cur.with(|at| {
        Some(match at {
            At::Run => return None,
            At::Done => Saved::Done,
            At::Receive => Saved::Receive,
            At::Invoke => Saved::Invoke,
            At::Wait(t) => Saved::Wait(*t),
            At::Pick { alarms, chosen } => Saved::Pick {
                alarms: alarms.clone(),
                chosen: match chosen {
                    Some((i, c)) => Some((*i, Box::new(capture(c)?))),
                    None => None,
                },
            },
            At::Seq(i, c) => Saved::Seq(*i, Box::new(capture(c)?)),
            At::Flow(v) => Saved::Flow(v.iter().map(|c| capture(c)).collect::<Option<_>>()?),
            At::Loop(c) => Saved::Loop(Box::new(capture(c)?)),
            At::If(i, c) => Saved::If(*i, Box::new(capture(c)?)),
            At::Each {
                end,
                done,
                wanted,
                branches,
            } => Saved::Each {
                end: *end,
                done: *done,
                wanted: *wanted,
                branches: branches
                    .iter()
                    .map(|(i, c)| Some((*i, capture(c)?)))
                    .collect::<Option<_>>()?,
            },
            At::Scope {
                frame,
                body,
                handler,
            } => Saved::Scope(Box::new(SavedScope {
                frame: saved_frame(frame.as_ref()),
                body: match handler {
                    // The body ended with the fault being handled: nothing of it to keep.
                    Some(_) => Saved::Done,
                    None => capture(body)?,
                },
                handler: match handler {
                    Some((c, f, h)) => Some((*c, saved_frame(f.as_ref()), capture(h)?)),
                    None => None,
                },
            })),
        })
    })
}

fn saved_frame(f: &dyn FrameView) -> SavedFrame {
    let (vars, corrs, fault) = f.data();
    SavedFrame { vars, corrs, fault }
}

impl Saved {
    /// The earliest timer the position waits for.
    pub fn due(&self) -> Option<i64> {
        let mut best: Option<i64> = None;
        let mut note = |t: i64| best = Some(best.map_or(t, |b| b.min(t)));
        self.walk(&mut |s| match s {
            Saved::Wait(t) => note(*t),
            Saved::Pick {
                alarms,
                chosen: None,
            } => alarms.iter().for_each(|t| note(*t)),
            _ => {}
        });
        best
    }

    fn walk(&self, f: &mut impl FnMut(&Saved)) {
        f(self);
        match self {
            Saved::Pick {
                chosen: Some((_, c)),
                ..
            }
            | Saved::Seq(_, c)
            | Saved::Loop(c)
            | Saved::If(_, c) => c.walk(f),
            Saved::Flow(v) => v.iter().for_each(|c| c.walk(f)),
            Saved::Each { branches, .. } => branches.iter().for_each(|(_, c)| c.walk(f)),
            Saved::Scope(s) => {
                s.body.walk(f);
                if let Some((_, _, h)) = &s.handler {
                    h.walk(f);
                }
            }
            _ => {}
        }
    }

    fn to_json(&self) -> Json {
        match self {
            Saved::Done => json!("done"),
            Saved::Receive => json!("receive"),
            Saved::Invoke => json!("invoke"),
            Saved::Wait(t) => json!({ "wait": t }),
            Saved::Pick { alarms, chosen } => json!({ "pick": {
                "alarms": alarms,
                "chosen": chosen.as_ref().map(|(i, c)| json!([i, c.to_json()])),
            }}),
            Saved::Seq(i, c) => json!({ "seq": [i, c.to_json()] }),
            Saved::Flow(v) => json!({ "flow": v.iter().map(Saved::to_json).collect::<Vec<_>>() }),
            Saved::Loop(c) => json!({ "loop": c.to_json() }),
            Saved::If(i, c) => json!({ "if": [i, c.to_json()] }),
            Saved::Each {
                end,
                done,
                wanted,
                branches,
            } => json!({ "each": {
                "end": end,
                "done": done,
                "wanted": wanted,
                "branches": branches.iter().map(|(i, c)| json!([i, c.to_json()])).collect::<Vec<_>>(),
            }}),
            Saved::Scope(s) => json!({ "scope": {
                "frame": frame_json(&s.frame),
                "body": s.body.to_json(),
                "handler": s.handler.as_ref().map(|(c, f, h)| json!({
                    "catch": c,
                    "frame": frame_json(f),
                    "at": h.to_json(),
                })),
            }}),
        }
    }

    fn from_json(j: &Json) -> Result<Saved, String> {
        if let Some(s) = j.as_str() {
            return match s {
                "done" => Ok(Saved::Done),
                "receive" => Ok(Saved::Receive),
                "invoke" => Ok(Saved::Invoke),
                other => Err(format!("unknown position '{other}'")),
            };
        }
        let o = j.as_object().ok_or("a position is not an object")?;
        let (k, v) = o.iter().next().ok_or("an empty position")?;
        let pair = |v: &Json| -> Result<(usize, Box<Saved>), String> {
            let a = v.as_array().filter(|a| a.len() == 2).ok_or("not a pair")?;
            Ok((int(&a[0])? as usize, Box::new(Saved::from_json(&a[1])?)))
        };
        Ok(match k.as_str() {
            "wait" => Saved::Wait(int(v)?),
            "pick" => Saved::Pick {
                alarms: v["alarms"]
                    .as_array()
                    .ok_or("pick without alarms")?
                    .iter()
                    .map(int)
                    .collect::<Result<_, _>>()?,
                chosen: match &v["chosen"] {
                    Json::Null => None,
                    c => Some(pair(c)?),
                },
            },
            "seq" => {
                let (i, c) = pair(v)?;
                Saved::Seq(i, c)
            }
            "flow" => Saved::Flow(
                v.as_array()
                    .ok_or("flow is not a list")?
                    .iter()
                    .map(Saved::from_json)
                    .collect::<Result<_, _>>()?,
            ),
            "loop" => Saved::Loop(Box::new(Saved::from_json(v)?)),
            "if" => {
                let (i, c) = pair(v)?;
                Saved::If(i, c)
            }
            "each" => Saved::Each {
                end: int(&v["end"])? as u64,
                done: int(&v["done"])? as u64,
                wanted: match &v["wanted"] {
                    Json::Null => None,
                    w => Some(int(w)? as u64),
                },
                branches: v["branches"]
                    .as_array()
                    .ok_or("forEach without branches")?
                    .iter()
                    .map(|b| pair(b).map(|(i, c)| (i as u64, *c)))
                    .collect::<Result<_, _>>()?,
            },
            "scope" => Saved::Scope(Box::new(SavedScope {
                frame: frame_from(&v["frame"])?,
                body: Saved::from_json(&v["body"])?,
                handler: match &v["handler"] {
                    Json::Null => None,
                    h => Some((
                        match &h["catch"] {
                            Json::Null => None,
                            c => Some(int(c)? as usize),
                        },
                        frame_from(&h["frame"])?,
                        Saved::from_json(&h["at"])?,
                    )),
                },
            })),
            other => return Err(format!("unknown position '{other}'")),
        })
    }
}

fn int(j: &Json) -> Result<i64, String> {
    j.as_i64().ok_or_else(|| format!("{j} is not an integer"))
}

fn frame_json(f: &SavedFrame) -> Json {
    json!({
        "vars": f.vars.iter().map(|v| v.as_ref().map(|d| d.to_xml(NodeId::ROOT))).collect::<Vec<_>>(),
        "corrs": f.corrs,
        "fault": f.fault.as_ref().map(fault_json),
    })
}

fn frame_from(j: &Json) -> Result<SavedFrame, String> {
    let vars = j["vars"]
        .as_array()
        .ok_or("a frame without variables")?
        .iter()
        .map(|v| match v {
            Json::Null => Ok(None),
            Json::String(s) => Doc::parse(s)
                .map(|d| Some(Arc::new(d)))
                .map_err(|e| format!("a saved variable is not XML: {e}")),
            _ => Err("a saved variable is neither XML nor null".to_owned()),
        })
        .collect::<Result<_, _>>()?;
    let corrs = j["corrs"]
        .as_array()
        .ok_or("a frame without correlation sets")?
        .iter()
        .map(|c| match c {
            Json::Null => Ok(None),
            Json::Array(a) => a
                .iter()
                .map(|s| s.as_str().map(str::to_owned).ok_or("a correlation value"))
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
                .map_err(str::to_owned),
            _ => Err("a correlation set is neither a list nor null".to_owned()),
        })
        .collect::<Result<_, _>>()?;
    let fault = match &j["fault"] {
        Json::Null => None,
        f => Some(fault_from(f)?),
    };
    Ok(SavedFrame { vars, corrs, fault })
}

/// A fault as JSON (also the final state of a faulted instance).
pub(crate) fn fault_json(f: &Fault) -> Json {
    json!({
        "ns": f.name.ns,
        "name": f.name.local,
        "text": f.text,
        "data": f.data.as_ref().map(|d| d.to_xml(NodeId::ROOT)),
    })
}

fn fault_from(j: &Json) -> Result<Fault, String> {
    let s = |k: &str| {
        j[k].as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("a saved fault without '{k}'"))
    };
    Ok(Fault {
        name: Name::new(s("ns")?, s("name")?),
        text: s("text")?,
        data: match &j["data"] {
            Json::String(x) => {
                Some(Arc::new(Doc::parse(x).map_err(|e| {
                    format!("a saved fault's data is not XML: {e}")
                })?))
            }
            _ => None,
        },
    })
}

/// An open request-response exchange, as saved (its client is gone after a restart).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SavedExchange {
    pub partner_link: usize,
    pub operation: String,
    pub message_exchange: Option<String>,
}

/// Everything saved about a waiting instance.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Snapshot {
    /// The process's name (Clark notation) and the digest of its `.bpel` file.
    pub process: String,
    pub digest: String,
    pub keys: Vec<(usize, Vec<String>)>,
    pub open: Vec<SavedExchange>,
    pub at: Saved,
}

impl Snapshot {
    pub fn to_json(&self) -> String {
        json!({
            "format": crate::store::FORMAT,
            "process": self.process,
            "digest": self.digest,
            "keys": self.keys.iter().map(|(s, v)| json!([s, v])).collect::<Vec<_>>(),
            "open": self.open.iter().map(|o| json!([o.partner_link, o.operation, o.message_exchange])).collect::<Vec<_>>(),
            "at": self.at.to_json(),
        })
        .to_string()
    }

    /// Reads a snapshot; one written by another format version is refused by name.
    pub fn from_json(text: &str) -> Result<Snapshot, String> {
        let j: Json =
            serde_json::from_str(text).map_err(|e| format!("the snapshot is not JSON: {e}"))?;
        let format = j["format"].as_u64().unwrap_or(0);
        if format != u64::from(crate::store::FORMAT) {
            return Err(format!(
                "the snapshot has format {format}; this busbar reads format {}",
                crate::store::FORMAT
            ));
        }
        let text_of = |k: &str| {
            j[k].as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("the snapshot has no '{k}'"))
        };
        let keys = j["keys"]
            .as_array()
            .ok_or("the snapshot has no keys")?
            .iter()
            .map(|k| {
                let set = int(&k[0])? as usize;
                let vals = k[1]
                    .as_array()
                    .ok_or("a key without values")?
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned).ok_or("a key value"))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((set, vals))
            })
            .collect::<Result<_, String>>()?;
        let open = j["open"]
            .as_array()
            .ok_or("the snapshot has no exchanges")?
            .iter()
            .map(|o| {
                Ok(SavedExchange {
                    partner_link: int(&o[0])? as usize,
                    operation: o[1].as_str().ok_or("an exchange's operation")?.to_owned(),
                    message_exchange: o[2].as_str().map(str::to_owned),
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Snapshot {
            process: text_of("process")?,
            digest: text_of("digest")?,
            keys,
            open,
            at: Saved::from_json(&j["at"])?,
        })
    }
}

/// One correlation key as the store indexes it: the set and its values.
pub(crate) fn key_string(set: usize, vals: &[String]) -> String {
    let mut s = set.to_string();
    for v in vals {
        s.push('\u{1f}');
        s.push_str(v);
    }
    s
}

/// A stable digest of a process file's bytes (FNV-1a, 64 bits, hex).
pub(crate) fn digest(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The final state of a finished instance: the root frame's variables and the fault.
pub(crate) fn final_json(
    root: Option<&SavedFrame>,
    names: &[String],
    fault: Option<&Fault>,
) -> String {
    let vars: serde_json::Map<String, Json> = match root {
        Some(f) => names
            .iter()
            .zip(&f.vars)
            .map(|(n, v)| {
                (
                    n.clone(),
                    v.as_ref()
                        .map_or(Json::Null, |d| Json::String(d.to_xml(NodeId::ROOT))),
                )
            })
            .collect(),
        None => serde_json::Map::new(),
    };
    json!({
        "format": crate::store::FORMAT,
        "variables": vars,
        "fault": fault.map(fault_json),
    })
    .to_string()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(x: &str) -> Option<Arc<Doc>> {
        Some(Arc::new(Doc::parse(x).unwrap()))
    }

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let frame = SavedFrame {
            vars: vec![
                doc("<message><part><a:x xmlns:a=\"urn:a\">1 &amp; 2</a:x></part></message>"),
                None,
            ],
            corrs: vec![Some(vec!["k1".into(), "ü".into()]), None],
            fault: None,
        };
        let handler = SavedFrame {
            vars: vec![doc("<f>data</f>")],
            corrs: vec![],
            fault: Some(Fault {
                name: Name::new("urn:f", "oops"),
                data: doc("<f>data</f>"),
                text: "thrown".into(),
            }),
        };
        let at = Saved::Scope(Box::new(SavedScope {
            frame: frame.clone(),
            body: Saved::Seq(
                2,
                Box::new(Saved::Flow(vec![
                    Saved::Done,
                    Saved::Receive,
                    Saved::Invoke,
                    Saved::Wait(1_700_000_000_123),
                    Saved::Pick {
                        alarms: vec![5, 7],
                        chosen: None,
                    },
                    Saved::Loop(Box::new(Saved::If(
                        1,
                        Box::new(Saved::Each {
                            end: 9,
                            done: 3,
                            wanted: Some(5),
                            branches: vec![(
                                4,
                                Saved::Scope(Box::new(SavedScope {
                                    frame: handler.clone(),
                                    body: Saved::Done,
                                    handler: Some((None, handler.clone(), Saved::Receive)),
                                })),
                            )],
                        }),
                    ))),
                ])),
            ),
            handler: None,
        }));
        let s = Snapshot {
            process: "{urn:p}P".into(),
            digest: digest(b"<process/>"),
            keys: vec![(0, vec!["k1".into(), "ü".into()])],
            open: vec![SavedExchange {
                partner_link: 1,
                operation: "op".into(),
                message_exchange: None,
            }],
            at,
        };
        let back = Snapshot::from_json(&s.to_json()).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.at.due(), Some(5));
    }

    #[test]
    fn another_format_or_broken_json_is_refused_by_name() {
        let e = Snapshot::from_json(r#"{"format": 99, "at": "done"}"#).unwrap_err();
        assert!(e.contains("format 99"), "{e}");
        let e = Snapshot::from_json("{").unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let e = Snapshot::from_json(
            r#"{"format": 1, "process": "p", "digest": "d", "keys": [], "open": [], "at": {"warp": 1}}"#,
        )
        .unwrap_err();
        assert!(e.contains("warp"), "{e}");
    }

    #[test]
    fn a_running_branch_means_no_snapshot() {
        let a = Cur::new();
        let b = Cur::new();
        b.set(At::Receive);
        let root = Cur::new();
        root.set(At::Flow(vec![a.clone(), b]));
        assert_eq!(capture(&root), None);
        a.set(At::Done);
        assert_eq!(
            capture(&root),
            Some(Saved::Flow(vec![Saved::Done, Saved::Receive]))
        );
    }
}

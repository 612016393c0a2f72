//! Session mode (`bmoe-top --session -- bmoe-cli … --session`): the conversation the panel
//! drives and what it sends.
//!
//! The engine's side arrives as ordinary events ([`SessionEvent`] next to the per-token ones);
//! the panel's own requests are events too ([`SessionEvent::Sent`]), pushed on the same timeline,
//! so the conversation is a fold like everything else and survives a refold. Building a request
//! ([`Composer`]) is separate from writing it to the engine's stdin (the event loop's job).

use bmoe_telemetry::protocol::{GenerateRequest, Request, ThinkCtl};

/// What the engine said about the loaded model (`BMOE_READY`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReadyFacts {
    /// Model load time, s.
    pub load_s: f64,
    /// Architecture.
    pub arch: String,
    /// Context length.
    pub n_ctx: u64,
    /// How `"think":false` can be honoured (`template`, `prefill`, `none`).
    pub think_ctl: String,
    /// Effective routing width.
    pub n_expert_used: u64,
}

/// A session-level event: the engine's control lines and the panel's own requests.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    /// `BMOE_READY`: the model is loaded.
    Ready(ReadyFacts),
    /// The panel sent a `generate` request.
    Sent {
        /// Request id.
        id: i64,
        /// The user message.
        prompt: String,
        /// Whether it starts a new chat.
        clear_kv: bool,
        /// Whether the model may reason.
        think: bool,
    },
    /// The panel sent `cancel`.
    CancelSent,
    /// `BMOE_BEGIN`: the engine started request `id`.
    Begin(i64),
    /// `BMOE_DONE` of request `id`.
    Done {
        /// Request id.
        id: i64,
        /// The generation was cancelled.
        cancelled: bool,
        /// Tokens generated.
        tokens: u64,
        /// Decode rate.
        tok_s: f64,
        /// Context length after the turn.
        n_past: u64,
    },
    /// `BMOE_ERROR`.
    Error {
        /// Request id (0 when the engine could not tell).
        id: i64,
        /// The process is ending.
        fatal: bool,
        /// The engine's message.
        msg: String,
    },
}

/// Where a turn stands.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnState {
    /// Sent, not begun yet (the engine may still be loading).
    Sent,
    /// `BMOE_BEGIN` seen, tokens streaming.
    Generating,
    /// `BMOE_DONE` seen.
    Done {
        /// Cancelled before `n_predict`.
        cancelled: bool,
        /// Tokens generated.
        tokens: u64,
        /// Decode rate.
        tok_s: f64,
    },
    /// `BMOE_ERROR` for this request.
    Error(String),
}

/// One prompt and its reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Request id.
    pub id: i64,
    /// The user message as sent (raw; cleaned when drawn).
    pub prompt: String,
    /// It started a new chat.
    pub clear_kv: bool,
    /// Reasoning was allowed.
    pub think: bool,
    /// Where it stands.
    pub state: TurnState,
    /// The final answer, once done (raw). While generating, the live text is the run's.
    pub text: String,
    /// The final thinking span, once done (raw).
    pub reasoning: String,
    /// Non-fatal `BMOE_ERROR`s that came before this turn's `BMOE_DONE` (an output file of the
    /// engine failed, e.g. a full disk): the text is whole, but the run's files are not.
    pub errors: Vec<String>,
}

impl Turn {
    /// Whether the engine still owes this turn a `BMOE_DONE` / `BMOE_ERROR`.
    pub fn in_flight(&self) -> bool {
        matches!(self.state, TurnState::Sent | TurnState::Generating)
    }
}

/// The conversation folded from [`SessionEvent`]s.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionLog {
    /// `BMOE_READY`, once seen.
    pub ready: Option<ReadyFacts>,
    /// Turns in the order sent.
    pub turns: Vec<Turn>,
    /// A cancel was sent for the turn in flight.
    pub cancel_pending: bool,
    /// The last `BMOE_ERROR` that named no turn of ours, with its fatality.
    pub orphan_error: Option<(bool, String)>,
    /// Context length after the last finished turn.
    pub n_past: Option<u64>,
}

impl SessionLog {
    /// Folds one event. `text` / `reasoning` are the generation's current texts, which a
    /// finished turn keeps.
    pub fn apply(&mut self, e: &SessionEvent, text: &str, reasoning: &str) {
        match e {
            SessionEvent::Ready(r) => self.ready = Some(r.clone()),
            SessionEvent::Sent {
                id,
                prompt,
                clear_kv,
                think,
            } => self.turns.push(Turn {
                id: *id,
                prompt: prompt.clone(),
                clear_kv: *clear_kv,
                think: *think,
                state: TurnState::Sent,
                text: String::new(),
                reasoning: String::new(),
                errors: Vec::new(),
            }),
            SessionEvent::CancelSent => self.cancel_pending = true,
            SessionEvent::Begin(id) => {
                let t = self.turn_mut(*id);
                t.state = TurnState::Generating;
            }
            SessionEvent::Done {
                id,
                cancelled,
                tokens,
                tok_s,
                n_past,
            } => {
                self.cancel_pending = false;
                self.n_past = Some(*n_past);
                let t = self.turn_mut(*id);
                // An error before the DONE did not end the turn: keep it beside the result.
                if let TurnState::Error(msg) = &t.state {
                    t.errors.push(msg.clone());
                }
                t.state = TurnState::Done {
                    cancelled: *cancelled,
                    tokens: *tokens,
                    tok_s: *tok_s,
                };
                t.text = text.to_string();
                t.reasoning = reasoning.to_string();
            }
            SessionEvent::Error { id, fatal, msg } => {
                self.cancel_pending = false;
                match self.turns.iter_mut().find(|t| t.id == *id) {
                    Some(t) => {
                        t.state = TurnState::Error(msg.clone());
                        if *fatal {
                            self.orphan_error = Some((true, msg.clone()));
                        }
                    }
                    None => self.orphan_error = Some((*fatal, msg.clone())),
                }
            }
        }
    }

    /// The turn with `id`; a turn the panel did not send (another writer on the engine's
    /// stdin) is added so its reply still has a place.
    fn turn_mut(&mut self, id: i64) -> &mut Turn {
        let idx = match self.turns.iter().position(|t| t.id == id) {
            Some(i) => i,
            None => {
                self.turns.push(Turn {
                    id,
                    prompt: format!("(request {id}, not sent from this panel)"),
                    clear_kv: false,
                    think: true,
                    state: TurnState::Sent,
                    text: String::new(),
                    reasoning: String::new(),
                    errors: Vec::new(),
                });
                self.turns.len() - 1
            }
        };
        &mut self.turns[idx]
    }

    /// The turn the engine still owes an answer, if any.
    pub fn in_flight(&self) -> Option<&Turn> {
        self.turns.iter().rev().find(|t| t.in_flight())
    }

    /// Whether the engine said it is ending.
    pub fn fatal(&self) -> bool {
        matches!(self.orphan_error, Some((true, _)))
    }
}

/// Why a prompt line cannot be sent now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Nothing typed.
    Empty,
    /// A generation is still in flight.
    Busy(i64),
    /// The engine is gone or said it is ending.
    Ended,
    /// A `/` command that could not be applied.
    Command(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Empty => f.write_str("type a prompt first"),
            Refusal::Busy(id) => write!(f, "#{id} is still generating: Esc cancels it"),
            Refusal::Ended => f.write_str("the session has ended: Ctrl-D quits"),
            Refusal::Command(why) => f.write_str(why),
        }
    }
}

/// The prompt line and the settings of the next request.
#[derive(Debug, Clone, PartialEq)]
pub struct Composer {
    /// What is typed so far.
    pub input: String,
    /// The next request starts a new chat (`clear_kv:true`). True for the first prompt;
    /// Ctrl-N sets it again.
    pub new_chat: bool,
    /// The next request lets the model reason (`think`); Ctrl-R toggles it.
    pub think: bool,
    /// `n_predict` of every request; `None` = the engine's `-n`.
    pub n_predict: Option<u64>,
    /// Id of the next request.
    pub next_id: i64,
    /// Why the last Enter or Esc did nothing, until the next key.
    pub notice: Option<String>,
}

impl Default for Composer {
    fn default() -> Self {
        Composer {
            input: String::new(),
            new_chat: true,
            think: true,
            n_predict: None,
            next_id: 1,
            notice: None,
        }
    }
}

/// What Enter on the prompt line does.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// A request to write to the engine, and the event that records it.
    Request(Request, SessionEvent),
    /// A `/` command changed a setting; nothing is sent. The text says what changed.
    Setting(String),
}

impl Composer {
    /// A `/` command typed on the prompt line: `/n N` sets `n_predict` of the next requests,
    /// `/n` alone returns to the engine's `-n`. `None` when the line is a prompt.
    ///
    /// # Errors
    /// An unknown command or a bad number, as the text to show.
    fn command(&mut self) -> Option<Result<String, String>> {
        let line = self.input.trim();
        let rest = line.strip_prefix('/')?;
        let mut words = rest.split_whitespace();
        let out = match (words.next(), words.next(), words.next()) {
            (Some("n"), None, None) => {
                self.n_predict = None;
                Ok("n_predict: the engine's -n from the next request on".to_string())
            }
            (Some("n"), Some(v), None) => match v.parse::<u64>() {
                Ok(n) if n > 0 => {
                    self.n_predict = Some(n);
                    Ok(format!("n_predict {n} from the next request on"))
                }
                _ => Err(format!("`/n {v}`: expected a positive token count")),
            },
            _ => Err(format!(
                "unknown command `{line}`: /n N sets n_predict, /n resets it"
            )),
        };
        self.input.clear();
        Some(out)
    }

    /// Enter on the prompt line: a `/` command is applied here; a prompt becomes the `generate`
    /// request and the event that records it, the input is consumed and the next request
    /// continues the chat.
    ///
    /// # Errors
    /// [`Refusal`] when nothing is typed, a generation is in flight, the session ended, or a
    /// command is wrong.
    pub fn enter(&mut self, log: &SessionLog, ended: bool) -> Result<Submitted, Refusal> {
        match self.command() {
            Some(Ok(what)) => Ok(Submitted::Setting(what)),
            Some(Err(why)) => Err(Refusal::Command(why)),
            None => self
                .submit(log, ended)
                .map(|(req, ev)| Submitted::Request(req, ev)),
        }
    }

    /// The `generate` request for the typed prompt, and the event that records it; the input is
    /// consumed and the next request continues the chat.
    ///
    /// # Errors
    /// [`Refusal`] when nothing is typed, a generation is in flight or the session ended.
    pub fn submit(
        &mut self,
        log: &SessionLog,
        ended: bool,
    ) -> Result<(Request, SessionEvent), Refusal> {
        if ended || log.fatal() {
            return Err(Refusal::Ended);
        }
        if let Some(t) = log.in_flight() {
            return Err(Refusal::Busy(t.id));
        }
        let prompt = self.input.trim().to_string();
        if prompt.is_empty() {
            return Err(Refusal::Empty);
        }
        let id = self.next_id;
        let req = GenerateRequest {
            id,
            prompt: prompt.clone(),
            n_predict: self.n_predict,
            think: Some(self.think),
            clear_kv: Some(self.new_chat),
        };
        let ev = SessionEvent::Sent {
            id,
            prompt,
            clear_kv: self.new_chat,
            think: self.think,
        };
        self.next_id += 1;
        self.new_chat = false;
        self.input.clear();
        self.notice = None;
        Ok((Request::Generate(req), ev))
    }

    /// Whether a think toggle means anything on this model: not when it reasons regardless
    /// (`think_ctl` = `none`).
    pub fn think_controllable(log: &SessionLog) -> bool {
        log.ready
            .as_ref()
            .is_none_or(|r| ThinkCtl::from_wire(&r.think_ctl) != ThinkCtl::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(c: &mut Composer, log: &mut SessionLog, text: &str) -> Request {
        c.input = text.into();
        let (req, ev) = c.submit(log, false).expect("accepted");
        log.apply(&ev, "", "");
        req
    }

    #[test]
    fn first_prompt_starts_a_chat_and_later_ones_continue_it() {
        let (mut c, mut log) = (Composer::default(), SessionLog::default());
        let r = sent(&mut c, &mut log, "  hello  ");
        assert_eq!(
            r.to_line(),
            r#"{"cmd":"generate","id":1,"prompt":"hello","think":true,"clear_kv":true}"#
        );
        assert_eq!(
            c.submit(&log, false).map(|_| ()),
            Err(Refusal::Busy(1)),
            "one generation at a time"
        );
        log.apply(&SessionEvent::Begin(1), "", "");
        log.apply(
            &SessionEvent::Done {
                id: 1,
                cancelled: false,
                tokens: 3,
                tok_s: 9.0,
                n_past: 20,
            },
            "Hi.",
            "",
        );
        assert_eq!(log.turns[0].text, "Hi.");
        assert_eq!(c.submit(&log, false).map(|_| ()), Err(Refusal::Empty));
        c.n_predict = Some(8);
        let r = sent(&mut c, &mut log, "more");
        assert_eq!(
            r.to_line(),
            r#"{"cmd":"generate","id":2,"prompt":"more","n_predict":8,"think":true,"clear_kv":false}"#
        );
        log.apply(
            &SessionEvent::Error {
                id: 2,
                fatal: false,
                msg: "prompt too long".into(),
            },
            "",
            "",
        );
        assert_eq!(
            log.turns[1].state,
            TurnState::Error("prompt too long".into())
        );
        assert!(log.in_flight().is_none());
        c.new_chat = true;
        c.think = false;
        let r = sent(&mut c, &mut log, "again");
        assert_eq!(
            r.to_line(),
            r#"{"cmd":"generate","id":3,"prompt":"again","n_predict":8,"think":false,"clear_kv":true}"#
        );
    }

    #[test]
    fn slash_n_sets_n_predict_without_sending() {
        let (mut c, log) = (Composer::default(), SessionLog::default());
        c.input = "/n 6".into();
        assert_eq!(
            c.enter(&log, false),
            Ok(Submitted::Setting(
                "n_predict 6 from the next request on".into()
            ))
        );
        assert_eq!((c.n_predict, c.input.as_str(), c.next_id), (Some(6), "", 1));
        c.input = "/n many".into();
        assert!(matches!(c.enter(&log, false), Err(Refusal::Command(_))));
        c.input = "/x".into();
        assert!(matches!(c.enter(&log, false), Err(Refusal::Command(w)) if w.contains("unknown")));
        c.input = "/n".into();
        assert!(matches!(c.enter(&log, false), Ok(Submitted::Setting(_))));
        assert_eq!(c.n_predict, None);
        c.input = "hi".into();
        assert!(matches!(
            c.enter(&log, false),
            Ok(Submitted::Request(Request::Generate(g), _)) if g.n_predict.is_none()
        ));
    }

    #[test]
    fn a_fatal_error_ends_the_session() {
        let (mut c, mut log) = (Composer::default(), SessionLog::default());
        log.apply(
            &SessionEvent::Error {
                id: 0,
                fatal: true,
                msg: "model failed to load".into(),
            },
            "",
            "",
        );
        c.input = "hi".into();
        assert_eq!(c.submit(&log, false).map(|_| ()), Err(Refusal::Ended));
        assert_eq!(
            Composer::default()
                .submit(&SessionLog::default(), true)
                .map(|_| ()),
            Err(Refusal::Ended)
        );
    }

    #[test]
    fn an_error_before_the_done_is_kept_beside_the_result() {
        let mut log = SessionLog::default();
        log.apply(&SessionEvent::Begin(4), "", "");
        let full = "writing --csv run.csv: No space left on device";
        log.apply(
            &SessionEvent::Error {
                id: 4,
                fatal: false,
                msg: full.into(),
            },
            "",
            "",
        );
        log.apply(
            &SessionEvent::Done {
                id: 4,
                cancelled: false,
                tokens: 5,
                tok_s: 2.0,
                n_past: 9,
            },
            "Hi.",
            "",
        );
        let t = &log.turns[0];
        assert!(matches!(t.state, TurnState::Done { tokens: 5, .. }));
        assert_eq!(
            t.errors,
            vec![full.to_string()],
            "the failed sink is not forgotten"
        );
        assert_eq!(log.orphan_error, None);
    }

    #[test]
    fn a_begin_for_an_unknown_id_gets_a_placeholder_turn() {
        let mut log = SessionLog::default();
        log.apply(&SessionEvent::Begin(7), "", "");
        assert_eq!(log.turns.len(), 1);
        assert!(log.turns[0].prompt.contains("request 7"));
        assert!(log.in_flight().is_some());
    }
}

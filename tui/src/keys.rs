//! Keys and mouse to actions, and actions applied to the state.

use crossterm::event::{
    Event as TermEvent, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind,
};

use crate::session::Composer;
use crate::state::{App, Focus, SourceKind};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `q`, F10 (and Esc with nothing to close, outside a session).
    Quit,
    /// Ctrl-C: interrupt the spawned engine (or quit when there is none).
    Interrupt,
    /// `space`.
    Pause,
    /// `?` / F1: the help popup on / off.
    Help,
    /// Esc in a session while the help is open: closes it.
    CloseHelp,
    /// Esc outside a session: closes the help popup when it is open, else quits (the htop and
    /// btm habit).
    Back,
    /// `←` (while paused).
    StepBack,
    /// `→` (while paused).
    StepForward,
    /// `[`.
    SeekBack,
    /// `]`.
    SeekForward,
    /// `Home`.
    SeekStart,
    /// `End`.
    SeekEnd,
    /// `+`.
    Faster,
    /// `-`.
    Slower,
    /// `t`.
    ToggleFocus,
    /// Scroll the focused pane up by n lines.
    ScrollUp(u16),
    /// Scroll the focused pane down by n lines.
    ScrollDown(u16),
    /// Mouse wheel over the answer.
    AnswerUp,
    /// Mouse wheel over the answer.
    AnswerDown,
    /// The terminal changed size.
    Redraw,
    /// Session: a character typed into the prompt line.
    Type(char),
    /// Session: Backspace.
    Backspace,
    /// Session: Ctrl-U clears the prompt line.
    ClearInput,
    /// Session: Enter sends the prompt (`generate`).
    Send,
    /// Session: Esc cancels the generation in flight (`cancel`).
    Cancel,
    /// Session: Ctrl-N toggles whether the next prompt starts a new chat (`clear_kv`).
    NewChat,
    /// Session: Ctrl-R toggles reasoning for the next prompt (`think`).
    ToggleThink,
}

/// Maps one terminal event; `None` for events the panel ignores.
pub fn map(ev: &TermEvent) -> Option<Action> {
    match ev {
        TermEvent::Key(k) => map_key(k),
        TermEvent::Mouse(m) => match m.kind {
            MouseEventKind::ScrollUp => Some(Action::AnswerUp),
            MouseEventKind::ScrollDown => Some(Action::AnswerDown),
            _ => None,
        },
        TermEvent::Resize(..) => Some(Action::Redraw),
        _ => None,
    }
}

/// Maps one terminal event in session mode, where printable keys type into the prompt line:
/// commands move to Enter, Esc, Tab, the function keys and Ctrl chords. `?` opens the help only
/// on an empty prompt line (and closes it while it is open); inside a prompt it is text.
pub fn map_session(ev: &TermEvent, help_open: bool, input_empty: bool) -> Option<Action> {
    let TermEvent::Key(k) = ev else {
        return map(ev);
    };
    if k.kind == KeyEventKind::Release {
        return None;
    }
    if k.modifiers.contains(KeyModifiers::CONTROL) {
        return match k.code {
            KeyCode::Char('c') => Some(Action::Interrupt),
            KeyCode::Char('d') | KeyCode::Char('q') => Some(Action::Quit),
            KeyCode::Char('n') => Some(Action::NewChat),
            KeyCode::Char('r') => Some(Action::ToggleThink),
            KeyCode::Char('u') => Some(Action::ClearInput),
            _ => None,
        };
    }
    Some(match k.code {
        KeyCode::Esc if help_open => Action::CloseHelp,
        KeyCode::Esc => Action::Cancel,
        KeyCode::Enter => Action::Send,
        KeyCode::Backspace => Action::Backspace,
        KeyCode::F(1) => Action::Help,
        KeyCode::F(10) => Action::Quit,
        KeyCode::Char('?') if help_open || input_empty => Action::Help,
        KeyCode::Tab => Action::ToggleFocus,
        KeyCode::Up => Action::ScrollUp(1),
        KeyCode::Down => Action::ScrollDown(1),
        KeyCode::PageUp => Action::ScrollUp(10),
        KeyCode::PageDown => Action::ScrollDown(10),
        KeyCode::Char(c) => Action::Type(c),
        _ => return None,
    })
}

fn map_key(k: &KeyEvent) -> Option<Action> {
    if k.kind == KeyEventKind::Release {
        return None;
    }
    if k.modifiers.contains(KeyModifiers::CONTROL) {
        return matches!(k.code, KeyCode::Char('c')).then_some(Action::Interrupt);
    }
    Some(match k.code {
        KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::F(10) => Action::Quit,
        KeyCode::Char(' ') => Action::Pause,
        KeyCode::Char('?') | KeyCode::F(1) => Action::Help,
        KeyCode::Esc => Action::Back,
        KeyCode::Left => Action::StepBack,
        KeyCode::Right => Action::StepForward,
        KeyCode::Char('[') => Action::SeekBack,
        KeyCode::Char(']') => Action::SeekForward,
        KeyCode::Home => Action::SeekStart,
        KeyCode::End => Action::SeekEnd,
        KeyCode::Char('+') | KeyCode::Char('=') => Action::Faster,
        KeyCode::Char('-') | KeyCode::Char('_') => Action::Slower,
        KeyCode::Char('t') => Action::ToggleFocus,
        KeyCode::Up => Action::ScrollUp(1),
        KeyCode::Down => Action::ScrollDown(1),
        KeyCode::PageUp => Action::ScrollUp(10),
        KeyCode::PageDown => Action::ScrollDown(10),
        _ => return None,
    })
}

/// Session mode: pasted text goes into the prompt line, its line breaks as spaces (the prompt
/// line is one line, and a pasted newline must not send half a prompt).
pub fn paste(app: &mut App, text: &str) {
    app.dirty = true;
    app.composer.notice = None;
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    app.composer.input.push_str(&flat);
}

/// Applies an action to the state. Interrupt and quit are only recorded here, and Send and
/// Cancel do nothing: the event loop owns the child process and its stdin, and acts on them
/// (through [`App::submit`] / [`App::cancel`]).
pub fn apply(app: &mut App, action: Action) {
    app.dirty = true;
    if !matches!(action, Action::Redraw | Action::Send | Action::Cancel) {
        app.composer.notice = None;
    }
    match action {
        Action::Type(c) => app.composer.input.push(c),
        Action::Backspace => {
            app.composer.input.pop();
        }
        Action::ClearInput => app.composer.input.clear(),
        Action::Send | Action::Cancel => {}
        Action::NewChat => app.composer.new_chat = !app.composer.new_chat,
        Action::ToggleThink => {
            if Composer::think_controllable(&app.run.session) {
                app.composer.think = !app.composer.think;
            } else {
                app.composer.notice = Some(
                    "this model reasons on every turn (think_ctl none): it cannot be turned off"
                        .into(),
                );
            }
        }
        Action::Quit => app.quit = true,
        Action::Interrupt => {}
        Action::Pause => app.toggle_pause(),
        Action::Help => app.help = !app.help,
        Action::CloseHelp => app.help = false,
        Action::Back if app.help => app.help = false,
        Action::Back => app.quit = true,
        Action::StepBack if app.paused => app.step_back(),
        Action::StepForward if app.paused => app.step_forward(),
        Action::StepBack | Action::StepForward => {}
        Action::SeekBack | Action::SeekForward | Action::SeekStart | Action::SeekEnd => {
            // Seeking a live source means looking back: freeze the display first.
            if app.kind != SourceKind::Replay && !app.paused {
                app.paused = true;
            }
            match action {
                Action::SeekBack => app.seek_fraction(false),
                Action::SeekForward => app.seek_fraction(true),
                Action::SeekStart => app.seek_tokens(0),
                _ => app.seek_tokens(usize::MAX),
            }
        }
        Action::Faster => app.speed = app.speed.faster(),
        Action::Slower => app.speed = app.speed.slower(),
        Action::ToggleFocus => {
            app.focus = match app.focus {
                Focus::Answer => Focus::Telemetry,
                Focus::Telemetry => Focus::Answer,
            }
        }
        Action::ScrollUp(n) => match app.focus {
            Focus::Answer => app.answer_scroll = app.answer_scroll.saturating_add(n),
            Focus::Telemetry => app.detail_scroll = app.detail_scroll.saturating_sub(n),
        },
        Action::ScrollDown(n) => match app.focus {
            Focus::Answer => app.answer_scroll = app.answer_scroll.saturating_sub(n),
            Focus::Telemetry => app.detail_scroll = app.detail_scroll.saturating_add(n),
        },
        Action::AnswerUp => app.answer_scroll = app.answer_scroll.saturating_add(3),
        Action::AnswerDown => app.answer_scroll = app.answer_scroll.saturating_sub(3),
        Action::Redraw => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Event, RunConfig, TokenSample};
    use crossterm::event::{KeyEventState, MouseEvent};

    fn key(code: KeyCode) -> TermEvent {
        TermEvent::Key(KeyEvent {
            code,
            modifiers: KeyModifiers::NONE,
            kind: KeyEventKind::Press,
            state: KeyEventState::NONE,
        })
    }

    #[test]
    fn keys_map_to_actions() {
        assert_eq!(map(&key(KeyCode::Char('q'))), Some(Action::Quit));
        assert_eq!(map(&key(KeyCode::Char(' '))), Some(Action::Pause));
        assert_eq!(map(&key(KeyCode::Char('?'))), Some(Action::Help));
        assert_eq!(map(&key(KeyCode::Left)), Some(Action::StepBack));
        assert_eq!(map(&key(KeyCode::Char('+'))), Some(Action::Faster));
        assert_eq!(map(&key(KeyCode::Char('t'))), Some(Action::ToggleFocus));
        assert_eq!(map(&key(KeyCode::Char('x'))), None);
        assert_eq!(map(&key(KeyCode::F(1))), Some(Action::Help));
        assert_eq!(map(&key(KeyCode::F(10))), Some(Action::Quit));
        assert_eq!(map(&key(KeyCode::Esc)), Some(Action::Back));
        let ctrl_c = TermEvent::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
        assert_eq!(map(&ctrl_c), Some(Action::Interrupt));
        let wheel = TermEvent::Mouse(MouseEvent {
            kind: MouseEventKind::ScrollUp,
            column: 1,
            row: 1,
            modifiers: KeyModifiers::NONE,
        });
        assert_eq!(map(&wheel), Some(Action::AnswerUp));
    }

    #[test]
    fn session_keys_type_into_the_prompt_and_chords_command() {
        let k = |code| map_session(&key(code), false, false);
        assert_eq!(k(KeyCode::Char('q')), Some(Action::Type('q')));
        assert_eq!(k(KeyCode::Char(' ')), Some(Action::Type(' ')));
        assert_eq!(k(KeyCode::Enter), Some(Action::Send));
        assert_eq!(k(KeyCode::Esc), Some(Action::Cancel));
        assert_eq!(
            map_session(&key(KeyCode::Esc), true, false),
            Some(Action::CloseHelp)
        );
        assert_eq!(k(KeyCode::F(1)), Some(Action::Help));
        assert_eq!(k(KeyCode::F(10)), Some(Action::Quit));
        // `?` is text inside a prompt, the help key on an empty line and while the help is open.
        assert_eq!(k(KeyCode::Char('?')), Some(Action::Type('?')));
        assert_eq!(
            map_session(&key(KeyCode::Char('?')), false, true),
            Some(Action::Help)
        );
        assert_eq!(
            map_session(&key(KeyCode::Char('?')), true, false),
            Some(Action::Help)
        );
        let ctrl = |c| TermEvent::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL));
        assert_eq!(map_session(&ctrl('n'), false, false), Some(Action::NewChat));
        assert_eq!(
            map_session(&ctrl('c'), false, false),
            Some(Action::Interrupt)
        );
        assert_eq!(map_session(&ctrl('d'), false, false), Some(Action::Quit));

        let mut app = App::new(SourceKind::Session, "s", RunConfig::default());
        for c in "hi!".chars() {
            apply(&mut app, Action::Type(c));
        }
        apply(&mut app, Action::Backspace);
        assert_eq!(app.composer.input, "hi");
        assert!(app.composer.new_chat);
        apply(&mut app, Action::NewChat);
        assert!(!app.composer.new_chat);
        apply(&mut app, Action::ToggleThink);
        assert!(!app.composer.think);
        apply(&mut app, Action::ClearInput);
        assert!(app.composer.input.is_empty());
        paste(&mut app, "two\nlines");
        assert_eq!(app.composer.input, "two lines");
    }

    #[test]
    fn steps_only_while_paused() {
        let mut app = App::new(SourceKind::Replay, "r", RunConfig::default());
        for i in 1..=3 {
            app.push(Event::Token(
                Box::new(TokenSample {
                    step: i,
                    wall_ms: 10.0,
                    ..TokenSample::default()
                }),
                None,
            ));
        }
        apply(&mut app, Action::StepForward);
        assert_eq!(app.tokens_applied, 0);
        apply(&mut app, Action::Pause);
        apply(&mut app, Action::StepForward);
        apply(&mut app, Action::StepForward);
        assert_eq!(app.run.step, 2);
        apply(&mut app, Action::StepBack);
        assert_eq!(app.run.step, 1);
        apply(&mut app, Action::SeekEnd);
        assert_eq!(app.run.step, 3);
        apply(&mut app, Action::Faster);
        assert_eq!(app.speed.label(), "2×");
        apply(&mut app, Action::ToggleFocus);
        assert_eq!(app.focus, Focus::Telemetry);
        apply(&mut app, Action::Quit);
        assert!(app.quit);
    }

    #[test]
    fn esc_closes_the_help_first_and_quits_after() {
        let mut app = App::new(SourceKind::Replay, "r", RunConfig::default());
        apply(&mut app, Action::Help);
        assert!(app.help);
        apply(&mut app, Action::Back);
        assert!(!app.help);
        assert!(!app.quit, "the first Esc only closes the help");
        apply(&mut app, Action::Back);
        assert!(app.quit);
    }
}

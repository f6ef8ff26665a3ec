//! Parsing a command line with a real shell parser (`brush-parser`) and
//! walking the whole syntax tree.
//!
//! Every simple command the shell could run is recorded with its expanded
//! argv, including those hidden in lists, pipelines, subshells, functions,
//! control flow, command and process substitutions, here-documents fed to a
//! shell, and commands run by wrappers (`sudo`, `xargs`, `find -exec`,
//! `sh -c`, ...). Every redirection and assignment is checked too.
//!
//! Failure mode: anything that cannot be parsed or analysed becomes an
//! `unknown` finding that no allow rule can cover. The walker never panics
//! on input (the parser is run under `catch_unwind`, and input size and
//! nesting are bounded before parsing so that it cannot overflow the stack).

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use brush_parser::ast::{
    self, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, ExtendedTestExpr,
    IoFileRedirectKind, IoFileRedirectTarget, IoRedirect,
};
use brush_parser::{ParserOptions, word};

use crate::display;
use crate::risk::Risk;
use crate::table::{self, Effect};
use crate::word::{Arg, scan_word};
use crate::{CommandInfo, Finding};

/// Largest command line analysed, in bytes. Agents do not need more, and it
/// bounds the parser's work.
pub(crate) const MAX_INPUT: usize = 64 * 1024;
/// Deepest bracket nesting accepted before parsing, which keeps the
/// recursive-descent parser well inside a 2 MiB thread stack.
const MAX_NESTING: usize = 48;
/// Deepest recursion through `sh -c`, `eval`, substitutions and wrappers.
const MAX_DEPTH: usize = 16;
/// Most simple commands analysed in one command line.
const MAX_COMMANDS: usize = 2_000;

/// What analysing a command line found.
#[derive(Default)]
pub(crate) struct Analysis {
    pub commands: Vec<CommandInfo>,
    pub findings: Vec<Finding>,
    pub parse_error: Option<String>,
    /// How many commands of any kind (simple, compound, function
    /// definitions, tests) were seen; zero means there was nothing to run.
    pub nodes: usize,
}

/// Input a command reads on standard input, when statically known.
type Stdin = Option<String>;

struct Analyzer {
    out: Analysis,
    /// Names of shell functions defined anywhere in the command line.
    functions: HashSet<String>,
    /// Calls to names not in the table: (finding index, command index, name).
    unrecognised: Vec<(usize, usize, String)>,
    depth: usize,
    exhausted: bool,
    /// The text of each script being walked, innermost last, for looking
    /// at source spans.
    texts: Vec<Vec<char>>,
}

pub(crate) fn analyze_shell(command: &str) -> Analysis {
    let mut a = Analyzer::new();
    a.script(command, None);
    a.finish()
}

pub(crate) fn analyze_argv(argv: &[String]) -> Analysis {
    let mut a = Analyzer::new();
    let args: Vec<Arg> = argv.iter().map(Arg::literal).collect();
    a.out.nodes = 1;
    a.argv(args, None, None);
    a.finish()
}

fn options() -> ParserOptions {
    ParserOptions::default()
}

/// Parses `text` as a bash program, without letting a parser bug or a
/// pathological input take the host down.
fn parse_program(text: &str) -> Result<ast::Program, String> {
    if text.len() > MAX_INPUT {
        return Err(format!("it is longer than {MAX_INPUT} bytes"));
    }
    if nesting(text) > MAX_NESTING {
        return Err("it is nested too deeply".into());
    }
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut parser = brush_parser::Parser::new(text.as_bytes(), &options());
        parser.parse_program()
    }));
    match result {
        Ok(Ok(program)) => Ok(program),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the parser failed on it".into()),
    }
}

/// An upper bound on bracket nesting, ignoring quoting (so it may
/// over-count, which only makes the check stricter).
fn nesting(text: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '{' | '[' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' | '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    // Backticks cannot be counted by pairs; each may open a level.
    max.max(text.matches('`').count() / 2)
}

fn via_suffix(via: &Option<String>) -> String {
    match via {
        Some(v) => format!(" (via `{v}`)"),
        None => String::new(),
    }
}

impl Analyzer {
    fn new() -> Self {
        Analyzer {
            out: Analysis::default(),
            functions: HashSet::new(),
            unrecognised: Vec::new(),
            depth: 0,
            exhausted: false,
            texts: Vec::new(),
        }
    }

    fn finish(mut self) -> Analysis {
        // A call to a function defined in the same command line is as risky
        // as the function's body, which has been classified already.
        for (finding, command, name) in std::mem::take(&mut self.unrecognised) {
            if self.functions.contains(&name) {
                let f = &mut self.out.findings[finding];
                f.risk = Risk::ReadOnly;
                f.reason = format!("`{name}` calls a shell function defined in the command line");
                let risk = self
                    .out
                    .findings
                    .iter()
                    .filter(|f| f.command == Some(command))
                    .map(|f| f.risk)
                    .max()
                    .unwrap_or(Risk::ReadOnly);
                self.out.commands[command].risk = risk;
            }
        }
        self.out
    }

    /// Records a finding not attributable to a single command (and so not
    /// coverable by an allow rule).
    fn finding(&mut self, risk: Risk, reason: String) {
        self.out.findings.push(Finding {
            risk,
            reason,
            command: None,
        });
    }

    fn script(&mut self, text: &str, via: Option<String>) {
        if self.depth >= MAX_DEPTH {
            self.finding(
                Risk::Unknown,
                format!("`{}` is nested too deeply to analyse", display::clip(text)),
            );
            return;
        }
        match parse_program(text) {
            Ok(program) => {
                self.depth += 1;
                self.texts.push(text.chars().collect());
                for list in &program.complete_commands {
                    self.compound_list(list, &via);
                }
                self.texts.pop();
                self.depth -= 1;
            }
            Err(e) => {
                let where_ = via_suffix(&via);
                self.finding(
                    Risk::Unknown,
                    format!("could not parse `{}`{where_}: {e}", display::clip(text)),
                );
                if self.depth == 0 && self.out.parse_error.is_none() {
                    self.out.parse_error = Some(e);
                }
            }
        }
    }

    fn compound_list(&mut self, list: &CompoundList, via: &Option<String>) {
        for item in &list.0 {
            let and_or = &item.0;
            self.pipeline(&and_or.first, via);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p, via),
                }
            }
        }
    }

    fn pipeline(&mut self, p: &ast::Pipeline, via: &Option<String>) {
        for cmd in &p.seq {
            self.command(cmd, via);
        }
    }

    fn command(&mut self, cmd: &Command, via: &Option<String>) {
        self.out.nodes += 1;
        match cmd {
            Command::Simple(sc) => self.simple(sc, via),
            Command::Compound(cc, redirects) => {
                let mut stdin = None;
                if let Some(r) = redirects {
                    for io in &r.0 {
                        self.redirect(io, &mut stdin, via);
                    }
                }
                self.compound(cc, via);
            }
            Command::Function(def) => {
                let name = def.fname.value.clone();
                self.functions.insert(name.clone());
                let inner = Some(format!("function {name}"));
                self.compound(&def.body.0, &inner);
                let mut stdin = None;
                if let Some(r) = &def.body.1 {
                    for io in &r.0 {
                        self.redirect(io, &mut stdin, &inner);
                    }
                }
            }
            Command::ExtendedTest(test, redirects) => {
                self.extended_test(&test.expr, via);
                let mut stdin = None;
                if let Some(r) = redirects {
                    for io in &r.0 {
                        self.redirect(io, &mut stdin, via);
                    }
                }
            }
        }
    }

    fn compound(&mut self, cc: &CompoundCommand, via: &Option<String>) {
        match cc {
            CompoundCommand::Arithmetic(a) => {
                let span: Option<String> = self
                    .texts
                    .last()
                    .and_then(|t| t.get(a.loc.start.index..a.loc.end.index))
                    .map(|c| c.iter().collect());
                match span {
                    Some(s) if s.starts_with("((") => {
                        self.arithmetic(&a.expr.value, via);
                        let valid = crate::word::with_placeholders(&a.expr.value)
                            .is_some_and(|t| brush_parser::arithmetic::parse(&t).is_ok());
                        if valid {
                            self.out.findings.push(Finding {
                                risk: Risk::ReadOnly,
                                reason: format!(
                                    "`(({}))` only evaluates arithmetic",
                                    display::clip(a.expr.value.trim())
                                ),
                                command: None,
                            });
                        } else if s.len() >= 2 {
                            // Not arithmetic, so bash fails on it, but a
                            // POSIX sh would run it as nested subshells.
                            self.script(&s[1..s.len() - 1], via.clone());
                        }
                    }
                    // Bash reads `( (` (with a space) as two nested
                    // subshells, but brush-parser reads it as arithmetic:
                    // peel one level and analyse the rest as commands.
                    Some(s) if s.starts_with('(') && s.ends_with(')') && s.len() >= 2 => {
                        self.script(&s[1..s.len() - 1], via.clone());
                    }
                    _ => {
                        self.finding(
                            Risk::Unknown,
                            "could not locate a `((...))` command in the source".into(),
                        );
                        self.arithmetic(&a.expr.value, via);
                    }
                }
            }
            CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value, via);
                }
                self.compound_list(&f.body.list, via);
            }
            CompoundCommand::BraceGroup(b) => self.compound_list(&b.list, via),
            CompoundCommand::Subshell(s) => self.compound_list(&s.list, via),
            CompoundCommand::ForClause(f) => {
                for w in f.values.iter().flatten() {
                    self.word(&w.value, via);
                }
                self.compound_list(&f.body.list, via);
            }
            CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value, via);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, via);
                    }
                    if let Some(list) = &item.cmd {
                        self.compound_list(list, via);
                    }
                }
            }
            CompoundCommand::IfClause(i) => {
                self.compound_list(&i.condition, via);
                self.compound_list(&i.then, via);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.compound_list(c, via);
                    }
                    self.compound_list(&e.body, via);
                }
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                self.compound_list(&w.0, via);
                self.compound_list(&w.1.list, via);
            }
            CompoundCommand::Coprocess(c) => {
                self.finding(
                    Risk::Unknown,
                    "`coproc` runs a command as a coprocess, which is not analysed further".into(),
                );
                self.command(&c.body, via);
            }
        }
    }

    /// Arithmetic text may contain command substitutions, which run.
    fn arithmetic(&mut self, text: &str, via: &Option<String>) {
        if !text.contains('$') && !text.contains('`') {
            return;
        }
        match word::parse(text, &options()) {
            Ok(_) => {
                // Scanning it as a double-quoted word finds every
                // substitution inside.
                self.word(&format!("\"{}\"", text.replace('"', "\\\"")), via);
            }
            Err(_) => self.finding(
                Risk::Unknown,
                format!("could not analyse the arithmetic `{}`", display::clip(text)),
            ),
        }
    }

    fn extended_test(&mut self, e: &ExtendedTestExpr, via: &Option<String>) {
        use ast::{BinaryPredicate as B, UnaryPredicate as U};
        match e {
            ExtendedTestExpr::And(a, b) | ExtendedTestExpr::Or(a, b) => {
                self.extended_test(a, via);
                self.extended_test(b, via);
            }
            ExtendedTestExpr::Not(a) | ExtendedTestExpr::Parenthesized(a) => {
                self.extended_test(a, via)
            }
            ExtendedTestExpr::UnaryTest(pred, w) => {
                let args = self.word(&w.value, via);
                let evaluates = matches!(
                    pred,
                    U::ShellVariableIsSetAndAssigned | U::ShellVariableIsSetAndNameRef
                );
                self.check_evaluated(&args, evaluates);
            }
            ExtendedTestExpr::BinaryTest(pred, l, r) => {
                let evaluates = matches!(
                    pred,
                    B::ArithmeticEqualTo
                        | B::ArithmeticNotEqualTo
                        | B::ArithmeticLessThan
                        | B::ArithmeticLessThanOrEqualTo
                        | B::ArithmeticGreaterThan
                        | B::ArithmeticGreaterThanOrEqualTo
                );
                for w in [l, r] {
                    let args = self.word(&w.value, via);
                    self.check_evaluated(&args, evaluates);
                }
            }
        }
    }

    /// Bash evaluates some operands as arithmetic or subscripts, which runs
    /// any `$(...)` in their (already expanded) text.
    fn check_evaluated(&mut self, args: &[Arg], evaluates: bool) {
        if evaluates && args.iter().any(|a| a.literal_code || a.dynamic) {
            self.finding(
                Risk::Unknown,
                "a `[[ ]]` operand is evaluated as arithmetic and may contain a command substitution, which would run".into(),
            );
        }
    }

    /// Scans one source word: classifies its command substitutions and
    /// records its hazards, returning the arguments it expands to.
    fn word(&mut self, raw: &str, via: &Option<String>) -> Vec<Arg> {
        let scan = scan_word(raw);
        for h in scan.hazards {
            self.finding(Risk::Unknown, format!("{h}{}", via_suffix(via)));
        }
        for body in &scan.substitutions {
            self.script(body, Some("$(...)".into()));
        }
        scan.args
    }

    fn simple(&mut self, sc: &ast::SimpleCommand, via: &Option<String>) {
        let mut stdin: Stdin = None;
        let mut argv: Vec<Arg> = Vec::new();
        let mut assignments: Vec<(String, Vec<Arg>)> = Vec::new();
        // Prefix items, then the command word, then suffix items.
        for item in sc.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, &mut argv, &mut assignments, &mut stdin, via, true);
        }
        if let Some(w) = &sc.word_or_name {
            let args = self.word(&w.value, via);
            argv.extend(args);
        }
        for item in sc.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, &mut argv, &mut assignments, &mut stdin, via, false);
        }
        for (name, value) in &assignments {
            self.assignment(name, value, via);
        }
        if argv.is_empty() {
            return;
        }
        self.argv(argv, via.clone(), stdin);
    }

    fn item(
        &mut self,
        item: &CommandPrefixOrSuffixItem,
        argv: &mut Vec<Arg>,
        assignments: &mut Vec<(String, Vec<Arg>)>,
        stdin: &mut Stdin,
        via: &Option<String>,
        in_prefix: bool,
    ) {
        match item {
            CommandPrefixOrSuffixItem::IoRedirect(io) => self.redirect(io, stdin, via),
            CommandPrefixOrSuffixItem::Word(w) => {
                let args = self.word(&w.value, via);
                argv.extend(args);
            }
            CommandPrefixOrSuffixItem::AssignmentWord(a, w) => {
                let name = match &a.name {
                    ast::AssignmentName::VariableName(n) => n.clone(),
                    ast::AssignmentName::ArrayElementName(n, _) => n.clone(),
                };
                let mut values = Vec::new();
                match &a.value {
                    ast::AssignmentValue::Scalar(v) => values.extend(self.word(&v.value, via)),
                    ast::AssignmentValue::Array(items) => {
                        for (k, v) in items {
                            if let Some(k) = k {
                                values.extend(self.word(&k.value, via));
                            }
                            values.extend(self.word(&v.value, via));
                        }
                    }
                }
                if let ast::AssignmentName::ArrayElementName(_, index) = &a.name {
                    // The subscript is evaluated arithmetically.
                    self.arithmetic(index, via);
                    if index.contains('$') || index.contains('`') {
                        values.push(Arg {
                            text: index.clone(),
                            dynamic: true,
                            glob: false,
                            literal_code: true,
                        });
                    }
                }
                if in_prefix {
                    assignments.push((name, values));
                } else {
                    // `export X=1`: the builtin sees the whole word.
                    let _ = w;
                    let joined: Vec<&str> = values.iter().map(|v| v.text.as_str()).collect();
                    let op = if a.append { "+=" } else { "=" };
                    let mut shown = Arg::literal(format!("{name}{op}{}", joined.join(" ")));
                    shown.dynamic = values.iter().any(|v| v.dynamic);
                    shown.literal_code = values.iter().any(|v| v.literal_code);
                    assignments.push((name, values));
                    argv.push(shown);
                }
            }
            CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                self.compound_list(&sub.list, &Some("process substitution".into()));
                argv.push(Arg {
                    text: "/dev/fd/N".into(),
                    dynamic: true,
                    glob: false,
                    literal_code: false,
                });
            }
        }
    }

    fn assignment(&mut self, name: &str, value: &[Arg], via: &Option<String>) {
        if table::dangerous_env_var(name) {
            self.finding(
                Risk::Unknown,
                format!(
                    "sets `{name}`, which can make programs run other code{}",
                    via_suffix(via)
                ),
            );
        }
        if value.iter().any(|v| v.literal_code) {
            self.finding(
                Risk::Unknown,
                format!(
                    "assigns `{name}` text containing a command substitution, which bash runs if the value is evaluated arithmetically{}",
                    via_suffix(via)
                ),
            );
        }
    }

    fn redirect(&mut self, io: &IoRedirect, stdin: &mut Stdin, via: &Option<String>) {
        let suffix = via_suffix(via);
        match io {
            IoRedirect::File(fd, kind, target) => {
                let input = matches!(
                    kind,
                    IoFileRedirectKind::Read | IoFileRedirectKind::DuplicateInput
                );
                match target {
                    IoFileRedirectTarget::Fd(_) => {}
                    IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                        self.compound_list(&sub.list, &Some("process substitution".into()));
                    }
                    IoFileRedirectTarget::Filename(w) => {
                        let args = self.word(&w.value, via);
                        self.redirect_target(&args, input, &suffix);
                        if input && fd.is_none_or(|f| f == 0) {
                            *stdin = None;
                        }
                    }
                    IoFileRedirectTarget::Duplicate(w) => {
                        let args = self.word(&w.value, via);
                        // `2>&1`, `>&-`, `<&3-` only move descriptors; any
                        // other word is a file name (bash's `>&file`).
                        let is_fd = args.len() == 1
                            && args[0].is_static()
                            && (args[0].text == "-"
                                || args[0].text.trim_end_matches('-').parse::<u32>().is_ok());
                        if !is_fd {
                            self.redirect_target(&args, input, &suffix);
                        }
                    }
                }
            }
            IoRedirect::HereDocument(fd, doc) => {
                let body = &doc.doc.value;
                let mut dynamic = false;
                if doc.requires_expansion && (body.contains('$') || body.contains('`')) {
                    dynamic = true;
                    match word::parse_heredoc(body, &options()) {
                        Ok(pieces) => {
                            for p in pieces {
                                if let word::WordPiece::CommandSubstitution(s)
                                | word::WordPiece::BackquotedCommandSubstitution(s) = p.piece
                                {
                                    self.script(&s, Some("$(...)".into()));
                                }
                            }
                        }
                        Err(_) => self.finding(
                            Risk::Unknown,
                            format!("could not analyse a here-document{suffix}"),
                        ),
                    }
                }
                if fd.is_none_or(|f| f == 0) {
                    *stdin = if dynamic { None } else { Some(body.clone()) };
                }
            }
            IoRedirect::HereString(fd, w) => {
                let args = self.word(&w.value, via);
                if fd.is_none_or(|f| f == 0) {
                    *stdin = match args.as_slice() {
                        [a] if a.is_static() => Some(format!("{}\n", a.text)),
                        _ => None,
                    };
                }
            }
            IoRedirect::OutputAndError(w, _) => {
                let args = self.word(&w.value, via);
                self.redirect_target(&args, false, &suffix);
            }
        }
    }

    fn redirect_target(&mut self, args: &[Arg], input: bool, suffix: &str) {
        let Some(target) = args.first() else {
            return;
        };
        let path = display::clip(&target.text);
        if !target.is_static() || args.len() != 1 {
            // Bash opens `/dev/tcp/...` itself, even when the name comes
            // from an expansion, so an unknown target may be a socket.
            if input {
                self.finding(
                    Risk::Network,
                    format!("input is redirected from `{path}`, a name only known at run time (it could be a network socket){suffix}"),
                );
            } else {
                self.finding(
                    Risk::Unknown,
                    format!(
                        "output is redirected to `{path}`, a name only known at run time{suffix}"
                    ),
                );
            }
            return;
        }
        let t = target.text.as_str();
        if t.starts_with("/dev/tcp/") || t.starts_with("/dev/udp/") {
            self.finding(
                Risk::Network,
                format!("redirection to `{path}` opens a network connection{suffix}"),
            );
        } else if input {
            // Reading a file is read-only; nothing to report.
        } else if matches!(t, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty")
            || t.strip_prefix("/dev/fd/")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        {
            // Discarding or re-routing output writes nothing.
        } else if t.starts_with("/dev/") {
            self.finding(
                Risk::Unknown,
                format!("output redirected to the device `{path}`{suffix}"),
            );
        } else if table::sensitive_path(t) {
            self.finding(
                Risk::Unknown,
                format!("output redirected to `{path}`, a sensitive location (git internals, shell start-up files, tool configuration or system files){suffix}"),
            );
        } else {
            self.finding(
                Risk::Write,
                format!("output redirected to `{path}` (write){suffix}"),
            );
        }
    }

    /// Classifies one command given its expanded argv (never empty).
    fn argv(&mut self, argv: Vec<Arg>, via: Option<String>, stdin: Stdin) {
        if self.out.commands.len() >= MAX_COMMANDS {
            if !self.exhausted {
                self.exhausted = true;
                self.finding(
                    Risk::Unknown,
                    "the command line has too many commands to analyse".into(),
                );
            }
            return;
        }
        let suffix = via_suffix(&via);
        let texts: Vec<String> = argv.iter().map(|a| a.text.clone()).collect();
        let index = self.out.commands.len();
        let dynamic = argv.iter().any(|a| a.dynamic);
        let head = &argv[0];
        let name = match table::program_name(&head.text) {
            Ok(n) if head.is_static() => n.to_owned(),
            _ => head.text.clone(),
        };
        self.out.commands.push(CommandInfo {
            argv: texts,
            name,
            risk: Risk::ReadOnly,
            dynamic,
            via: via.clone(),
        });
        if head.dynamic || head.glob || head.text.is_empty() {
            let why = if head.glob {
                "contains a glob pattern"
            } else if head.text.contains("$(") || head.text.contains('`') {
                "comes from a command substitution"
            } else if head.dynamic {
                "comes from a variable"
            } else {
                "is empty"
            };
            self.out.commands[index].risk = Risk::Unknown;
            self.finding(
                Risk::Unknown,
                format!(
                    "the command name `{}` {why}, so it could be anything{suffix}",
                    display::clip(&head.text)
                ),
            );
            return;
        }
        let mut own = Risk::ReadOnly;
        // Bash itself only treats these paths specially in redirections,
        // but a word naming one is a strong sign of intent to connect.
        if let Some(a) = argv
            .iter()
            .find(|a| a.text.contains("/dev/tcp/") || a.text.contains("/dev/udp/"))
        {
            own = Risk::Network;
            self.out.findings.push(Finding {
                risk: Risk::Network,
                reason: format!(
                    "`{}` names a network socket{suffix}",
                    display::clip(&a.text)
                ),
                command: Some(index),
            });
        }
        for effect in table::classify(&argv) {
            match effect {
                Effect::Risk(risk, reason) => {
                    own = own.max(risk);
                    self.out.findings.push(Finding {
                        risk,
                        reason: format!("{reason}{suffix}"),
                        command: Some(index),
                    });
                }
                Effect::Unrecognised(reason) => {
                    own = Risk::Unknown;
                    self.unrecognised
                        .push((self.out.findings.len(), index, head.text.clone()));
                    self.out.findings.push(Finding {
                        risk: Risk::Unknown,
                        reason: format!("{reason}{suffix}"),
                        command: Some(index),
                    });
                }
                Effect::Run { argv: inner, via } => {
                    if self.depth >= MAX_DEPTH {
                        self.finding(Risk::Unknown, "commands are nested too deeply to analyse".into());
                        continue;
                    }
                    self.depth += 1;
                    self.argv(inner, Some(via), stdin.clone());
                    self.depth -= 1;
                }
                Effect::Script { text, via } => self.script(&text, Some(via)),
                Effect::StdinScript { via } => match &stdin {
                    Some(body) => self.script(body, Some(via)),
                    None => self.finding(
                        Risk::Unknown,
                        format!("`{via}` runs commands read from its standard input, which cannot be seen{suffix}"),
                    ),
                },
            }
        }
        self.out.commands[index].risk = own;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_nesting_is_refused_not_crashed() {
        let deep = format!("{}true{}", "(".repeat(5000), ")".repeat(5000));
        assert!(parse_program(&deep).is_err());
        let subst = format!("{}true{}", "$(echo ".repeat(40), ")".repeat(40));
        // Within limits: must parse and analyse without overflowing.
        let a = analyze_shell(&subst);
        assert!(!a.commands.is_empty());
    }
}

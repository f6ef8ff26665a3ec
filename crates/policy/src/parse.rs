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

use crate::risk::Risk;
use crate::table::{self, Effect};
use crate::word::{Arg, scan_word};
use crate::{CommandInfo, Context, Finding};
use crate::{display, protect, vars};

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
    /// Protected locations written, each with its reason.
    pub protected: Vec<String>,
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
    /// Where the command runs.
    context: Context,
    /// Variables whose value may be data (see `vars`), with how they got it.
    tainted: Vec<(String, String)>,
    /// Name references declared (`declare -n r=x`), whose later
    /// re-pointing by a `for` loop is checked in `finish`.
    namerefs: Vec<String>,
    /// `for` loops: the variable, and whether every word is a plain name
    /// that is not guarded (a `for` over a name reference re-points it).
    for_loops: Vec<(String, bool)>,
    /// Variables given the integer attribute (`declare -i`), with where.
    integers: Vec<(String, String)>,
    /// Variables named in arithmetic, with the arithmetic text.
    arith_refs: Vec<(String, String)>,
    /// A `cd`/`pushd` into a protected or run-time directory, after which
    /// relative writes may land in protected files.
    cd_protected: Option<String>,
}

pub(crate) fn analyze_shell(command: &str, context: &Context) -> Analysis {
    let mut a = Analyzer::new(context);
    a.script(command, None);
    a.finish()
}

pub(crate) fn analyze_argv(argv: &[String], context: &Context) -> Analysis {
    let mut a = Analyzer::new(context);
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
    fn new(context: &Context) -> Self {
        Analyzer {
            out: Analysis::default(),
            functions: HashSet::new(),
            unrecognised: Vec::new(),
            depth: 0,
            exhausted: false,
            texts: Vec::new(),
            context: context.clone(),
            tainted: Vec::new(),
            namerefs: Vec::new(),
            for_loops: Vec::new(),
            integers: Vec::new(),
            arith_refs: Vec::new(),
            cd_protected: None,
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
        self.resolve_arithmetic();
        self.resolve_namerefs();
        self.resolve_protected();
        self.out
    }

    /// Arithmetic that names a variable whose value may be data runs any
    /// `$(...)` in that data (see `vars`).
    fn resolve_arithmetic(&mut self) {
        let tainted = |name: &str| -> Option<String> {
            if vars::holds_data(name) {
                return Some(format!("`{name}` holds data bash or the caller put there"));
            }
            self.tainted
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, how)| how.clone())
        };
        let mut found: Vec<String> = Vec::new();
        for (name, text) in &self.arith_refs {
            if let Some(how) = tainted(name) {
                found.push(format!(
                    "the arithmetic `{}` evaluates `{name}`, whose value may come from a file or a command ({how}); bash runs any `$(...)` inside such a value",
                    display::clip(text.trim())
                ));
            }
        }
        for (name, what) in &self.integers {
            if let Some(how) = tainted(name) {
                found.push(format!(
                    "`{what}` makes `{name}` an integer, so the value it is given ({how}) is evaluated as arithmetic, which runs any `$(...)` inside it"
                ));
            }
        }
        for reason in found {
            if !self.out.findings.iter().any(|f| f.reason == reason) {
                self.finding(Risk::Unknown, reason);
            }
        }
    }

    /// A `for` loop whose variable is a name reference makes it refer to
    /// each word in turn, so assigning it assigns those variables.
    fn resolve_namerefs(&mut self) {
        let found: Vec<String> = self
            .for_loops
            .iter()
            .filter(|(var, plain)| !plain && self.namerefs.contains(var))
            .map(|(var, _)| {
                format!(
                    "`for {var} in ...` loops a name reference over words that are not plain, harmless variable names: assigning `{var}` in the loop assigns them"
                )
            })
            .collect();
        for reason in found {
            self.finding(Risk::Unknown, reason);
        }
    }

    /// Writes made from a protected directory (the exec's cwd, or one the
    /// command line changes into) may land in protected files.
    fn resolve_protected(&mut self) {
        let writes = self.out.findings.iter().any(|f| f.risk >= Risk::Write);
        if !writes {
            return;
        }
        let cwd = self.context.cwd.trim_start_matches("./").to_owned();
        if !cwd.is_empty() && cwd != "." && protect::protected_path(&format!("{cwd}/")) {
            self.protect(format!(
                "the command writes files and runs in `{}`: {}",
                display::clip(&cwd),
                protect::describe(&cwd)
            ));
        }
        if let Some(dir) = self.cd_protected.take() {
            self.protect(format!(
                "the command writes files after changing into `{dir}`, which is or may be a protected directory (git internals, Capstan's own config)"
            ));
        }
    }

    /// Records a protected write (also `unknown`: see `protect.rs`).
    fn protect(&mut self, reason: String) {
        if !self.out.findings.iter().any(|f| f.reason == reason) {
            self.finding(Risk::Unknown, reason.clone());
        }
        if !self.out.protected.contains(&reason) {
            self.out.protected.push(reason);
        }
    }

    fn taint(&mut self, name: &str, how: String) {
        if !self.tainted.iter().any(|(n, _)| n == name) {
            self.tainted.push((name.to_owned(), how));
        }
    }

    /// Records an arithmetic context: command output in it is evaluated as
    /// code, and the variables it names are checked in `finish`.
    fn arith_use(&mut self, text: &str) {
        let refs = vars::arith_refs(text);
        if refs.substitution {
            self.finding(
                Risk::Unknown,
                format!(
                    "the arithmetic `{}` evaluates the output of a command substitution, and bash runs any `$(...)` inside that output",
                    display::clip(text.trim())
                ),
            );
        }
        for name in refs.names {
            if table::dangerous_env_var(&name) {
                self.finding(
                    Risk::Unknown,
                    format!("the arithmetic `{}` may assign `{name}`, which can make programs run other code", display::clip(text.trim())),
                );
            }
            self.arith_refs.push((name, text.to_owned()));
        }
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
                let mut data = f.values.is_none();
                let mut plain = f.values.is_some();
                for w in f.values.iter().flatten() {
                    let args = self.word(&w.value, via);
                    data |= args.iter().any(|a| a.dynamic || a.glob);
                    plain &= args.iter().all(|a| {
                        a.is_static()
                            && vars::is_name(&a.text)
                            && !table::dangerous_env_var(&a.text)
                    });
                }
                self.for_loops.push((f.variable_name.clone(), plain));
                if data {
                    self.taint(
                        &f.variable_name,
                        format!("`for {}` loops over run-time words", f.variable_name),
                    );
                }
                self.assigns_name(&f.variable_name, "a `for` loop");
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

    /// Arithmetic text may contain command substitutions, which run, and
    /// names variables whose values bash evaluates in turn.
    fn arithmetic(&mut self, text: &str, via: &Option<String>) {
        self.arith_use(text);
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
    /// any `$(...)` in their (already expanded) text, and evaluates the
    /// values of the variables they name.
    fn check_evaluated(&mut self, args: &[Arg], evaluates: bool) {
        if !evaluates {
            return;
        }
        if args.iter().any(|a| a.literal_code) {
            self.finding(
                Risk::Unknown,
                "a `[[ ]]` operand is evaluated as arithmetic and contains a command substitution, which would run".into(),
            );
        }
        for a in args {
            self.arith_use(&a.text);
        }
    }

    /// Scans one source word: classifies its command substitutions and
    /// records its hazards, returning the arguments it expands to.
    fn word(&mut self, raw: &str, via: &Option<String>) -> Vec<Arg> {
        self.absorb(scan_word(raw), via)
    }

    /// Records what scanning a word (or an expanded here-document) found,
    /// returning its arguments.
    fn absorb(&mut self, scan: crate::word::WordScan, via: &Option<String>) -> Vec<Arg> {
        for h in scan.hazards {
            self.finding(Risk::Unknown, format!("{h}{}", via_suffix(via)));
        }
        for body in &scan.substitutions {
            self.script(body, Some("$(...)".into()));
        }
        for text in &scan.arith {
            self.arith_use(text);
        }
        for (name, dynamic) in &scan.assigned {
            if *dynamic {
                self.taint(
                    name,
                    format!("`${{{name}:=...}}` assigns it a run-time value"),
                );
            }
            self.assigns_name(name, "a `${...:=...}` expansion");
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
        // `{NAME}>file` opens a descriptor and stores its number in NAME;
        // the parser reads `{NAME}` as a word. Any such word in a command
        // with a redirection is taken as that assignment.
        let redirects = sc
            .prefix
            .iter()
            .flat_map(|p| p.0.iter())
            .chain(sc.suffix.iter().flat_map(|s| s.0.iter()))
            .any(|i| matches!(i, CommandPrefixOrSuffixItem::IoRedirect(_)));
        if redirects {
            let named: Vec<String> = argv
                .iter()
                .filter_map(|a| a.text.strip_prefix('{')?.strip_suffix('}'))
                .filter(|n| vars::is_name(n))
                .map(str::to_owned)
                .collect();
            for name in named {
                self.assigns_name(&name, &format!("the redirection `{{{name}}}>`"));
            }
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
                                // An indexed array's keys are arithmetic.
                                self.arith_use(&k.value);
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
        if let Some(v) = value
            .iter()
            .find(|v| v.dynamic && !vars::numeric_value(&v.text))
        {
            self.taint(name, format!("it is assigned `{}`", display::clip(&v.text)));
        }
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
                    match crate::word::scan_heredoc(body) {
                        Some(scan) => {
                            self.absorb(scan, via);
                        }
                        None => self.finding(
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
        } else if protect::protected_path(t) {
            self.protect(format!(
                "output is redirected to `{path}`{suffix}: {}",
                protect::describe(t)
            ));
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
        self.variables(&name_of(&argv[0].text), &argv[1..]);
        if name_of(&argv[0].text) == "git" && !self.context.repo.hazards.is_empty() {
            let keys: Vec<String> = self
                .context
                .repo
                .hazards
                .iter()
                .take(4)
                .map(|h| format!("`{}` (in {})", h.key, display::clip(&h.file)))
                .collect();
            let more = self.context.repo.hazards.len().saturating_sub(4);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            own = Risk::Unknown;
            self.finding(
                Risk::Unknown,
                format!(
                    "`{}` reads the repository's git configuration, which has {}{more}, not known to be harmless: git may run a program it names or use files outside the workspace{suffix}",
                    display::argv(&texts_of(&argv)),
                    keys.join(", ")
                ),
            );
        }
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
                Effect::Protected(reason) => self.protect(format!("{reason}{suffix}")),
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

    /// Shell builtins that give variables values, name them, or evaluate
    /// them as arithmetic (see `vars`). Every variable a builtin assigns,
    /// whether named as an operand or as an option's value (`read -a`,
    /// `printf -v`, `wait -p`, in a cluster or attached), goes through
    /// [`Self::name_operand`], which refuses guarded names and names only
    /// known at run time.
    fn variables(&mut self, name: &str, args: &[Arg]) {
        let Some(spec) = vars::builtin_options(name) else {
            if let "let" = name {
                for a in args {
                    self.arith_use(&a.text);
                }
            }
            return;
        };
        let parsed = vars::parse_builtin(args, spec);
        match name {
            "read" => {
                let how = "`read` reads it from input".to_owned();
                for a in parsed.values('a') {
                    self.name_operand(&a, "read", Some(&how));
                }
                for a in &parsed.operands {
                    self.name_operand(a, "read", Some(&how));
                }
            }
            "mapfile" | "readarray" => {
                let how = format!("`{name}` reads it from input");
                for a in &parsed.operands {
                    self.name_operand(a, name, Some(&how));
                }
            }
            "printf" => {
                let data = args.iter().any(|x| x.dynamic);
                let how = "`printf -v` formats run-time words into it".to_owned();
                for a in parsed.values('v') {
                    self.name_operand(&a, "printf -v", data.then_some(&how));
                }
            }
            "wait" => {
                for a in parsed.values('p') {
                    self.name_operand(&a, "wait -p", None);
                }
            }
            "getopts" => {
                if let Some(a) = parsed.operands.get(1) {
                    let how = "`getopts` stores an argument in it".to_owned();
                    self.name_operand(a, "getopts", Some(&how));
                }
            }
            "declare" | "typeset" | "local" | "export" | "readonly" => {
                self.declaration(name, &parsed);
            }
            "unset" => {
                for a in &parsed.operands {
                    self.name_operand(a, "unset", None);
                }
            }
            "test" | "[" => {
                if let Some(a) = args
                    .iter()
                    .position(|a| a.text == "-v")
                    .and_then(|i| args.get(i + 1))
                {
                    let (_, sub) = vars::name_and_subscript(&a.text);
                    if let Some(sub) = sub {
                        self.arith_use(sub);
                    }
                }
            }
            "cd" | "pushd" => {
                if let Some(a) = parsed.operands.first()
                    && (a.dynamic || protect::protected_path(&format!("{}/", a.text)))
                {
                    self.cd_protected = Some(display::clip(&a.text));
                }
            }
            _ => {}
        }
    }

    /// `declare`, `typeset`, `local`, `export`, `readonly`: every operand
    /// names a variable they set (or change the attributes of). A name
    /// reference (`-n`, in any cluster, or a flag word only known at run
    /// time) makes later assignments to it assignments to its target, so
    /// the target must be a plain, static name that is not guarded; a
    /// reference without a target gets it from its current value or the
    /// next assignment, which is not followed: it is unknown.
    fn declaration(&mut self, name: &str, parsed: &vars::Builtin) {
        let integer = parsed.has('-', 'i');
        let nameref = matches!(name, "declare" | "typeset" | "local")
            && (parsed.has('-', 'n') || parsed.dynamic_options);
        // `declare -p`, `-f` and `-F` without assignments only print.
        if (parsed.has('-', 'p') || parsed.has('-', 'f') || parsed.has('-', 'F'))
            && parsed
                .operands
                .iter()
                .all(|a| a.is_static() && !a.text.contains('='))
        {
            return;
        }
        for a in &parsed.operands {
            let (var, _) = vars::name_and_subscript(&a.text);
            let var = var.to_owned();
            if integer {
                self.integers
                    .push((var.clone(), format!("{name} -i {var}")));
            }
            let how = format!("`{name} -n` makes it refer to another variable");
            self.name_operand(a, name, nameref.then_some(&how));
            if !nameref {
                continue;
            }
            if a.dynamic {
                self.finding(
                    Risk::Unknown,
                    format!(
                        "`{name} -n` makes `{var}` refer to a variable named at run time: bash evaluates a name like `a[$(cmd)]` as a subscript, running the command, and assignments through it may set any variable"
                    ),
                );
                continue;
            }
            match a.text.split_once('=').map(|(_, t)| t) {
                Some(target) if vars::is_name(target) && !table::dangerous_env_var(target) => {
                    self.namerefs.push(var);
                }
                Some(target) => self.finding(
                    Risk::Unknown,
                    format!(
                        "`{name} -n` makes `{var}` refer to `{}`, so assigning `{var}` assigns that variable, which can make programs run other code",
                        display::clip(target)
                    ),
                ),
                None => self.finding(
                    Risk::Unknown,
                    format!(
                        "`{name} -n {var}` makes `{var}` a name reference whose target (its current value, or the next value given to it) is not followed: assigning it may set any variable"
                    ),
                ),
            }
        }
    }

    /// A variable name given to a builtin that assigns or tests it. Its
    /// subscript is arithmetic; a name only known at run time may be
    /// `a[$(cmd)]`; `taint` says how the value may be data.
    fn name_operand(&mut self, a: &Arg, builtin: &str, taint: Option<&String>) {
        let (var, sub) = vars::name_and_subscript(&a.text);
        if a.dynamic && (var.contains('$') || var.contains('`')) {
            self.finding(
                Risk::Unknown,
                format!(
                    "`{builtin}` is given the variable name `{}`, which is only known at run time: bash evaluates a name like `a[$(cmd)]` as a subscript, running the command",
                    display::clip(&a.text)
                ),
            );
            return;
        }
        if let Some(sub) = sub {
            self.arith_use(sub);
        }
        if let Some(how) = taint {
            self.taint(var, how.clone());
        }
        self.assigns_name(var, &format!("`{builtin}`"));
    }

    /// Changing (or unsetting) a variable that steers which code programs
    /// run is code; it would also undo the host's git safety settings.
    fn assigns_name(&mut self, name: &str, what: &str) {
        if table::dangerous_env_var(name) {
            self.finding(
                Risk::Unknown,
                format!("{what} changes `{name}`, which can make programs run other code"),
            );
        }
    }
}

/// The table name of a command word (`/usr/bin/git` is `git`).
fn name_of(word: &str) -> String {
    table::program_name(word).unwrap_or(word).to_owned()
}

fn texts_of(argv: &[Arg]) -> Vec<&str> {
    argv.iter().map(|a| a.text.as_str()).collect()
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
        let a = analyze_shell(&subst, &Context::default());
        assert!(!a.commands.is_empty());
    }
}

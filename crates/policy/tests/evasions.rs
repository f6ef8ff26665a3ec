//! Issue 41: evasions of the classifier, one list per root-cause class.
//! Every command here writes, deletes, reaches the network or runs code,
//! and must classify at least as the given risk (above `read_only`, so it
//! asks under `--approve none`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_policy::Risk::{self, Delete, Network, ReadOnly, Unknown, Write};
use capstan_policy::{Policy, Profile, Verdict, classify_shell};

fn check(class: &str, cases: &[(&str, Risk)]) {
    let mut failures = Vec::new();
    for &(command, at_least) in cases {
        assert!(
            at_least > ReadOnly,
            "{command}: a case must expect more than read_only"
        );
        let c = classify_shell(command);
        if c.risk < at_least {
            failures.push(format!(
                "{command:?}: expected at least {at_least}, got {} ({:?})",
                c.risk, c.reasons
            ));
        }
        // Under `--approve none` (the `cautious` profile with nobody to
        // ask) anything above read_only asks, so it does not run unasked.
        let verdict = Policy {
            profile: Profile::Cautious,
            ..Policy::default()
        }
        .evaluate_shell(command)
        .verdict;
        if verdict == Verdict::Allow {
            failures.push(format!("{command:?}: allowed without asking"));
        }
    }
    assert!(
        failures.is_empty(),
        "{class}: {} of {} evasions got through:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Class 1: long options abbreviated to a prefix (getopt_long, git's
/// parse-options, Getopt::Long), ambiguous prefixes, `--no-` negations
/// undoing a flag that lowered the risk.
#[test]
fn abbreviated_long_options_and_negations() {
    check(
        "long options",
        &[
            ("sort --compress-prog=sh f", Unknown),
            ("sort --comp sh -S 1 f", Unknown),
            ("sort --out=x.txt f", Write),
            ("tar --to-com='sh -c x' -xf a.tar", Unknown),
            ("tar --use-comp=./x -tf a.tar", Unknown),
            ("tar --checkpoint-ac=exec=sh -tf a.tar", Unknown),
            ("tar --to=sh -tf a.tar", Unknown),
            ("git log --outp=x.patch", Write),
            ("git diff --out x.patch", Write),
            ("git fetch --upload-p='rm -rf x' origin", Unknown),
            ("git ls-remote --upl='sh -c x' origin", Unknown),
            ("git grep --open='rm x' foo", Unknown),
            ("git archive --rem=host:r HEAD", Network),
            ("git branch --edit-d", Unknown),
            ("git rebase --exe='rm x' main", Unknown),
            ("git clean -n --no-dry-run", Delete),
            ("git clean --dry-run --no-d", Delete),
            ("git rm -n --no-dry-run x", Delete),
            ("git restore --staged --no-staged f", Delete),
            ("ack --noenv --env foo", Unknown),
            ("rg --pr ./evil foo", Unknown),
            ("rg --hostname=./evil -l foo", Unknown),
            ("cloc --extract-w='sh -c x' a.tgz", Unknown),
            ("less --log=out.txt f", Write),
            ("date --se=2020-01-01", Unknown),
            ("bat --pag='sh -c x' f", Unknown),
            ("diff3 --diff-p=./x a b c", Unknown),
            ("iconv --out=x f", Write),
            ("fzf --prev='rm {}'", Unknown),
            ("nm --plug=./evil.so a.out", Unknown),
            ("pip list --pyth=./evil", Unknown),
            ("npm ls --brow=./x", Unknown),
        ],
    );
}

/// Class 2: flags inside short-option clusters, attached values, and a
/// `--` that is an option's value rather than the end of the options.
#[test]
fn short_option_clusters_and_attached_values() {
    check(
        "short clusters",
        &[
            ("hash -rp /usr/bin/rm ls; ls f", Unknown),
            ("hash -p/usr/bin/rm ls; ls f", Unknown),
            ("hash -tp /bin/rm ls", Unknown),
            ("sort -ro out.txt f", Write),
            ("sort -rout.txt f", Write),
            ("sort -T -- --compress-program=sh f", Unknown),
            ("iconv -fUTF-8 -oout.txt f", Write),
            ("less -So log.txt f", Write),
            ("tar -tvI 'sh -c x' -f a.tar", Unknown),
            ("tar -xvIsh -f a.tar", Unknown),
            ("tar tfI a.tar prog", Unknown),
            ("rsync -avze 'sh -c x' src/ dst/", Unknown),
            ("git branch -vd feature", Delete),
            ("git branch -fM a b", Write),
            ("git grep -iO'rm x' foo", Unknown),
            ("git clone -uflag 'sh -c x' r d", Unknown),
            ("mapfile -tC cb arr < f", Unknown),
            ("readarray -tCcb arr < f", Unknown),
            ("xxd -rp dump.hex", Write),
            ("env -vuPATH ls", Unknown),
            ("env -iv ls", Unknown),
            ("fd -Hx rm {}", Unknown),
            ("zstdcat -fo out f.zst", Write),
            ("file -bC -m magic", Write),
            ("history -cw f.txt", Write),
            ("date -us 2020-01-01", Unknown),
            ("git tag -fa v1", Write),
            ("git reset --hard -q HEAD", Delete),
        ],
    );
}

/// Class 3: assignments to guarded variables made indirectly: name
/// references in all their declaring forms, builtins that assign a
/// variable named by an argument or option, `${VAR:=...}`, `{VAR}>`.
#[test]
fn indirect_assignments_to_guarded_variables() {
    check(
        "indirect assignments",
        &[
            ("declare -n r=PATH; r=0; ls", Unknown),
            ("typeset -n r=LD_PRELOAD; r=./x.so; ls", Unknown),
            (
                "f() { local -n r=BASH_ENV; r=./x; }; f; bash -c ls",
                Unknown,
            ),
            ("declare -gn r=PATH; r=.; ls", Unknown),
            ("declare -nr r=GIT_CONFIG_COUNT; git status", Unknown),
            ("declare -rn r=PAGER; r='sh -c x'; git log", Unknown),
            ("declare -n r; r=PATH; r=0; ls", Unknown),
            ("r=PATH; declare -n r; r=0; ls", Unknown),
            ("declare -n r=x; for r in PATH; do r=0; done; ls", Unknown),
            (
                "f() { for r in IFS; do r=/; done; }; declare -n r=y; f; ls",
                Unknown,
            ),
            ("command declare -n r=PATH; r=0; ls", Unknown),
            ("eval 'declare -n r=PATH'; r=0; ls", Unknown),
            ("printf -v PATH %s .; ls", Unknown),
            ("printf -vPATH %s .; ls", Unknown),
            ("builtin printf -v PS4 '$(rm x)'; set -x; ls", Unknown),
            ("read -r PATH < f; ls", Unknown),
            ("read -rd '' PATH < f; ls", Unknown),
            ("read -pd PATH < f; ls", Unknown),
            ("read -raBASH_ENV < f; bash -c ls", Unknown),
            ("mapfile -t PATH < f; ls", Unknown),
            ("readarray -d , -t IFS < f; ls $x", Unknown),
            ("getopts a: PATH -a x; ls", Unknown),
            ("sleep 0 & wait -n -p PATH; ls", Unknown),
            ("sleep 0 & wait -np PATH; ls", Unknown),
            (": ${BASH_ENV:=./x}; bash -c ls", Unknown),
            ("set -a; : ${GIT_EXTERNAL_DIFF=./x}; git diff", Unknown),
            ("x=PATH; : ${!x:=.}; ls", Unknown),
            ("cat <<EOF\n${BASH_ENV:=./x}\nEOF\nbash -c ls", Unknown),
            ("exec {PATH}>/dev/null; ls", Unknown),
            ("true {PATH}>/dev/null; ls", Unknown),
            ("BASH_CMDS[ls]=/bin/rm; ls x", Unknown),
            ("export -- PATH=.; ls", Unknown),
            ("declare -x PATH=.; ls", Unknown),
            ("f() { local PATH; ls; }; f", Unknown),
            ("readonly PS4='$(rm x)'; set -x; ls", Unknown),
            ("unset -v IFS; ls", Unknown),
            ("RUSTUP_TOOLCHAIN=./evil cargo --version", Unknown),
            ("PIP_PYTHON=./evil pip list", Unknown),
            ("FZF_DEFAULT_OPTS='--bind=start:execute(rm x)' fzf", Unknown),
            ("TERMINFO_DIRS=./t tput init", Unknown),
            ("GOTOOLCHAIN=go1.99.0 go version", Unknown),
            ("RIPGREP_CONFIG_PATH=./rc rg foo", Unknown),
            ("DOCKER_HOST=ssh://h docker ps", Unknown),
        ],
    );
}

/// Class 4: options of wrappers and read-only entries that the table did
/// not model. A wrapper refuses any option it does not know exactly; a
/// read-only entry's options that act are rows of the table.
#[test]
fn options_the_table_did_not_model() {
    check(
        "unmodelled options",
        &[
            ("xargs --process-slot-var=PATH ls", Unknown),
            ("xargs --process-slot-var PATH ls", Unknown),
            ("xargs --process-slot-var=LD_PRELOAD ls", Unknown),
            ("xargs --proc=PATH ls", Unknown),
            ("env --uns=PATH ls", Unknown),
            ("env -P /tmp ls", Unknown),
            ("env -u \"$V\" git status", Unknown),
            ("env - PATH=. ls", Unknown),
            ("timeout --sig=KILL 5 ls", Unknown),
            ("nice --adj=5 ls", Unknown),
            ("stdbuf --out=L ls", Unknown),
            ("time --out=t.txt ls", Unknown),
            ("time -ao t.txt ls", Write),
            ("find . -exec sort + --compress-program=sh \\;", Unknown),
            ("find . -execute rm", Unknown),
            ("fd --exec=rm", Unknown),
            ("cargo --frobnicate metadata --offline", Unknown),
            ("jobs -x rm -rf x", Delete),
            ("pip --python=./evil list", Unknown),
            ("rustc --print native-static-libs lib.rs", Write),
            ("awk -e 'BEGIN{}' -e 'BEGIN{system(\"rm x\")}'", Unknown),
            ("diff3 --diff-program=./x a b c", Unknown),
            ("nm --plugin ./x.so a.out", Unknown),
            ("rg --hostname-bin=./x foo", Unknown),
            ("zstdcat --rm f.zst", Delete),
            ("tar -tf host:a.tar", Network),
            ("git clone --template=./t https://x.test/r.git", Unknown),
            ("git init --template=./t", Unknown),
            ("git fsck --lost-found", Write),
            ("less --lesskey-src=./k f", Unknown),
            ("exec -a x -c git status", Unknown),
            ("exec -la x git status; exec -lc git status", Unknown),
            ("rpm -q --eval '%(rm -rf x)' bash", Unknown),
            ("rpm -qa --pipe 'sh -c x'", Unknown),
            ("docker --context=remote ps", Unknown),
            ("docker -H ssh://host ps", Unknown),
            ("npm config set foo get", Unknown),
            ("yarn config set script-shell ./x", Unknown),
            ("git reflog write HEAD x y msg", Write),
            ("bash -eo pipefail -c 'rm x'", Delete),
            ("git --config-env=core.pager=cat log", Unknown),
            (
                "git -c tar.tgz.command=sh archive --format=tgz HEAD",
                Unknown,
            ),
        ],
    );
}

/// What the stricter rules must not take away: ordinary spellings of
/// read-only commands stay read-only.
#[test]
fn ordinary_spellings_stay_read_only() {
    for command in [
        "sort -t, -k2 f",
        "sort -rn f | head",
        "date -Iseconds",
        "date -d yesterday +%F",
        "tar -tzf a.tgz",
        "tar --checkpoint=10 -tf a.tar",
        "git log --oneline -- src",
        "git branch -vv",
        "git branch --contains abc",
        "git branch --no-merged main",
        "git rm -n src/*.rs",
        "git clean -n",
        "git rm -n x",
        "git config --get-regexp 'remote\\..*'",
        "git tag -l 'v*'",
        "env -u LANG ls",
        "xargs -0 -n1 echo",
        "xargs --process-slot-var=SLOT echo",
        "find . -name '*.rs' -type f -mtime -1 -print",
        "find . -exec grep -l x {} +",
        "find . -path ./target -prune -o -name '*.rs' -newerBm ref -print",
        "find . \\( -name a -o -iname b \\) -not -empty -mtime -7 -maxdepth 2",
        "declare -n r=counts; r=1",
        "declare -p PATH",
        "for f in a b; do echo $f; done",
        "printf -v line '%s' x; echo \"$line\"",
        "read -r first < f; echo \"$first\"",
        "rustc --version",
        "rustc --print sysroot",
        "awk -e '{print $1}' f",
        "cat <<EOF\n${HOME}\nEOF",
        "fd -e rs",
        "jobs -l",
        "cargo --color always metadata --offline",
        "bash -eo pipefail -c 'ls | wc -l'",
        "npm config get registry",
        "yarn config get registry",
        "docker ps -a",
        "rpm -qa",
        "exec -a name ls",
    ] {
        let c = classify_shell(command);
        assert_eq!(c.risk, ReadOnly, "{command}: {:?}", c.reasons);
    }
}

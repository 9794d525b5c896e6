package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/session"
)

var writeTool = tool{
	description: "Write a file in the workspace, creating parent directories and replacing any existing file atomically (its mode is kept). A symbolic link is written through to its target when that target is inside the workspace.",
	schema: schema{
		{name: "path", kind: kindString, required: true, description: "File to write (absolute, or relative to /workspace)"},
		{name: "content", kind: kindString, required: true, description: "Content to write"},
	},
	run: runWrite,
}

// Limits of a path the write and edit tools accept, as Linux has them.
const (
	nameMax = 255
	pathMax = 4095
)

// Exit codes of writeScript and catScript besides a plain failure.
const (
	conflictExit = 9  // the file changed under an edit
	outsideExit  = 10 // the path resolves outside the workspace
)

// resolveScript is the coreutils half of the path check shared by the
// scripts that change a file. It sets real to the final target of $f (every
// symbolic link followed, the last component possibly missing) and refuses a
// target outside the workspace $ws: a link is written through only when it
// stays inside. One readlink resolves both; it runs under a timeout because
// readlink -m never ends on a link whose target grows under itself (l ->
// l/x), which perlResolve cuts off after 1000 links.
const resolveScript = `fail() { printf '%s\n' "$2" >&2; exit "$1"; }
r=()
{ mapfile -t -d '' r < <(timeout 5 readlink -zm -- "$f" "$ws"); } 2>/dev/null
[ "${#r[@]}" -eq 2 ] || fail 3 "Cannot resolve $show"
real=${r[0]} wsreal=${r[1]}
case $real in
"$wsreal" | "$wsreal"/*) ;;
*) fail 10 "Refusing $show: it is a symbolic link (or lies under one) that resolves to $real, outside $ws; links are followed only inside the workspace" ;;
esac
`

// perlResolve is resolveScript in perl, for the scripts' perl pass: it
// takes f, ws and show from @ARGV and sets $real and $wsreal, with the same
// messages and exit codes. canon is readlink -m (gnulib's canonicalize in
// CAN_MISSING mode): a component that is no link (missing, under a file,
// unreadable) is kept as it is; after 20 links, a link met again with the
// same rest of the path under the same directory is a loop and is kept
// unresolved, not followed; a parent that cannot be looked up then fails the
// whole resolve. Unlike readlink, canon gives up after 1000 links (the
// kernel gives up after 40): readlink -m follows a link whose target grows
// under itself (l -> l/x) for ever. fail removes what the script made before
// it exits. No module is loaded (each costs milliseconds of startup): the
// numbers used below are the same on Linux x86_64 and aarch64 (errno 17
// EEXIST; O_WRONLY 1, O_CREAT 0100, O_EXCL 0200, O_NONBLOCK 04000; LOCK_EX 2).
const perlResolve = `
my ($f, $ws, $show) = splice @ARGV, 0, 3;
our ($tmp, $old, @made);
sub fail {
	print STDERR "$_[1]\n";
	unlink $tmp if defined $tmp;
	for (reverse @made) { rmdir $_ or last }
	exit $_[0];
}
` + perlCanon + `my ($real, $wsreal) = (canon($f), canon($ws));
defined $real && defined $wsreal or fail(3, "Cannot resolve $show");
$real eq $wsreal || index($real, "$wsreal/") == 0
	or fail(10, "Refusing $show: it is a symbolic link (or lies under one) that resolves to $real, outside $ws; links are followed only inside the workspace");
`

// perlCanon defines canon, readlink -m in perl (see perlResolve).
const perlCanon = `sub canon {
	my ($rest, $dest, $links, %seen) = ($_[0], "", 0);
	while (1) {
		$rest =~ s{^/+}{};
		last if $rest eq "";
		my ($c, $after) = $rest =~ m{^([^/]*)(.*)$}s;
		if ($c eq "..") { $dest =~ s{/[^/]*$}{} }
		elsif ($c ne ".") {
			my $to = readlink "$dest/$c";
			if (!defined $to) { $dest .= "/$c" }
			elsif ($links++ >= 20 && do { my @st = stat "$dest/" or return undef; $seen{"$st[0] $st[1] $rest"}++ }) { $dest .= "/$c" }
			elsif ($links > 1000) { return undef }
			else { $rest = $to . $after; $dest = "" if $to =~ m{^/}; next }
		}
		$rest = $after;
	}
	return $dest eq "" ? "/" : $dest;
}
`

// writeScript replaces $f's final target with stdin atomically: the bytes
// land in a temp file beside the target and are renamed over it, so a reader
// never sees half a file. An existing file keeps its mode; a new one gets
// 644. When $old is a number, stdin starts with that many bytes, the file as
// the edit saw it, and the rename happens only if the file still holds
// exactly those bytes (the edit tool's lost-update guard), checked under a
// lock on the file. A failure removes the temp files and the directories this
// call created. Where perl exists (the image's perl-base), one perl process
// does it all, comparing the bytes themselves; else coreutils do, comparing
// sha256 digests, with the same results and messages.
const writeScript = `set -u
f=$1 old=$2 ws=$3 show=$4
command -v perl >/dev/null 2>&1 && exec perl -e '` + perlResolve + `
my $want = shift @ARGV;
-d $real and fail(3, "Path is a directory: $show");
binmode STDIN;
sub input {
	my $n = sysread(STDIN, $_[0], $_[1], length $_[0]);
	defined $n or fail(3, "Cannot write $show: $!");
	return $n;
}
if ($want ne "") {
	$old = "";
	while (length $old < $want) { input($old, $want - length $old) or fail(3, "Cannot write $show: input ended early") }
}
my ($dir) = $real =~ m{^(.*)/};
my $d = $dir;
my @missing;
while ($d ne "" && !-e $d && !-l $d) { unshift @missing, $d; $d =~ s{/[^/]*$}{} }
@missing = ($dir) if !@missing && !-d $dir;
for (@missing) {
	if (mkdir $_) { push @made, $_; next }
	my $err = "$!";
	# As mkdir -p: an existing directory will do; a name that cannot be
	# looked up (a link loop) is reported by why.
	if ($! == 17) { next if -d $_; $err = "$!" if !-e $_ }
	fail(3, "Cannot create the directory of $show: $err");
}
my @chars = ("A" .. "Z", "a" .. "z", "0" .. "9");
my $out;
until (defined $tmp) {
	my $name = "$dir/.oma-write." . join("", map { $chars[rand @chars] } 1 .. 8);
	if (sysopen($out, $name, 0301, 0600)) { $tmp = $name }
	elsif ($! != 17) { fail(3, "Cannot write $show: $!") }
}
while (input(my $buf = "", 65536)) {
	for (my $off = 0; $off < length $buf;) {
		my $w = syswrite($out, $buf, length($buf) - $off, $off);
		defined $w or fail(3, "Cannot write $show: $!");
		$off += $w;
	}
}
close $out or fail(3, "Cannot write $show: $!");
my @st = stat $real;
chmod(@st ? $st[2] & 07777 : 0644, $tmp);
my $lock; # held until exit: a handle closed at the end of a block would unlock before the rename
if (defined $old) {
	# Nonblocking opens: a FIFO put in place of the file cannot stall them.
	sysopen($lock, $real, 04000) or fail(9, "file changed since it was read");
	flock($lock, 2);
	# Compare the file the name holds now, not the one locked: a writer
	# that renamed over it while this waited for the lock has won.
	my ($now, $at) = (undef, 0);
	sysopen($now, $real, 04000) && -f $now or fail(9, "file changed since it was read");
	while (1) {
		my $n = sysread($now, my $buf, 65536);
		defined $n && $at + $n <= length $old && $buf eq substr($old, $at, $n) or fail(9, "file changed since it was read");
		last if $n == 0;
		$at += $n;
	}
	$at == length $old or fail(9, "file changed since it was read");
}
rename($tmp, $real) or fail(3, "Cannot write $show: $!");
' -- "$f" "$ws" "$show" "$old"
` + resolveScript + `
[ -d "$real" ] && fail 3 "Path is a directory: $show"
dir=${real%/*}
made='' d=$dir
while [ ! -e "$d" ] && [ ! -L "$d" ]; do made=$d; d=${d%/*}; done
tmp='' orig=''
cleanup() {
	[ -z "$tmp" ] || rm -f -- "$tmp"
	[ -z "$orig" ] || rm -f -- "$orig"
	[ -n "$made" ] || return 0
	d=$dir
	while rmdir -- "$d" 2>/dev/null && [ "$d" != "$made" ]; do d=${d%/*}; done
}
trap cleanup EXIT
reason() { printf '%s' "${1##*: }"; }
if [ -n "$old" ]; then
	orig=$(mktemp 2>/dev/null) || fail 3 "Cannot write $show: cannot make a temporary file"
	cat >"$orig" || fail 3 "Cannot write $show: cannot keep the original bytes"
	[ "$(stat -c %s -- "$orig")" -ge "$old" ] || fail 3 "Cannot write $show: input ended early"
fi
if [ -n "$made" ] || [ ! -d "$dir" ]; then
	err=$(mkdir -p -- "$dir" 2>&1) || fail 3 "Cannot create the directory of $show: $(reason "$err")"
fi
err=$(mktemp -- "$dir/.oma-write.XXXXXXXX" 2>&1) || fail 3 "Cannot write $show: $(reason "$err")"
tmp=$err
if [ -n "$old" ]; then
	err=$(tail -c +$((old + 1)) -- "$orig" 2>&1 >"$tmp") || fail 3 "Cannot write $show: $(reason "$err")"
else
	err=$(cat 2>&1 >"$tmp") || fail 3 "Cannot write $show: $(reason "$err")"
fi
if [ -e "$real" ]; then chmod --reference="$real" -- "$tmp"; else chmod 644 -- "$tmp"; fi
if [ -n "$old" ]; then
	# -f first: opening a FIFO would block (perl opens nonblocking).
	[ -f "$real" ] && { exec 9<"$real"; } 2>/dev/null || fail 9 "file changed since it was read"
	flock 9
	[ -f "$real" ] || fail 9 "file changed since it was read"
	had=$(head -c "$old" -- "$orig" | sha256sum) have=$(sha256sum <"$real")
	[ "$have" = "$had" ] || fail 9 "file changed since it was read"
fi
err=$(mv -fT -- "$tmp" "$real" 2>&1) || fail 3 "Cannot write $show: $(reason "$err")"
tmp='' made=''
`

func runWrite(ctx context.Context, t *Toolbox, a args, _ Progress) (string, error) {
	p, _ := a.str("path")
	content, _ := a.str("content")
	abs, err := t.changeablePath("write", p)
	if err != nil {
		return "", err
	}
	t.record("write")
	unlock := t.lockPath(abs)
	defer unlock()
	if err := t.writeFile(ctx, abs, p, nil, content); err != nil {
		t.written.drop(abs)
		return "", err
	}
	t.written.set(abs, content)
	return fmt.Sprintf("Successfully wrote %d bytes to %s", len(content), p), nil
}

// changeablePath resolves a path the write and edit tools may change: inside
// the workspace, not the workspace itself, and within Linux's name limits.
func (t *Toolbox) changeablePath(tool, p string) (string, error) {
	ws := t.sess.Paths().Workspace
	abs, err := resolveIn(tool, p, ws, ws)
	if err != nil {
		return "", err
	}
	if abs == ws {
		return "", inputErrorf(tool, "%s: path %s is the workspace directory, not a file", tool, quote(p))
	}
	if len(abs) > pathMax {
		return "", inputErrorf(tool, "%s: path is too long (%d bytes; the limit is %d)", tool, len(abs), pathMax)
	}
	for name := range strings.SplitSeq(abs, "/") {
		if len(name) > nameMax {
			return "", inputErrorf(tool, "%s: file name too long (%d bytes; the limit is %d)", tool, len(name), nameMax)
		}
	}
	return abs, nil
}

// writeFile is one guest round trip; the content travels on stdin. When
// original is not nil (an edit), it goes ahead of the content and the guest
// renames only if the file still holds exactly those bytes.
func (t *Toolbox) writeFile(ctx context.Context, abs, show string, original []byte, content string) error {
	old := ""
	stdin := io.Reader(strings.NewReader(content))
	if original != nil {
		old = strconv.Itoa(len(original))
		stdin = io.MultiReader(bytes.NewReader(original), stdin)
	}
	res, err := t.shell(ctx, session.Command{Script: writeScript, Builtin: agentwire.BuiltinWrite, Args: []string{abs, old, t.sess.Paths().Workspace, show}},
		session.ShellOptions{Stdin: stdin})
	if err != nil {
		return fmt.Errorf("write %s: %w", show, err)
	}
	if res.ExitCode != 0 {
		return guestError("write", show, res)
	}
	return nil
}

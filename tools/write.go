package tools

import (
	"context"
	"fmt"
	"strings"

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

// resolveScript is shared by the scripts that change a file. It sets real to
// the final target of $f (every symbolic link followed, the last component
// possibly missing) and refuses a target outside the workspace $ws: a link is
// written through only when it stays inside. One readlink resolves both.
const resolveScript = `fail() { printf '%s\n' "$2" >&2; exit "$1"; }
r=()
{ mapfile -t -d '' r < <(readlink -zm -- "$f" "$ws"); } 2>/dev/null
[ "${#r[@]}" -eq 2 ] || fail 3 "Cannot resolve $show"
real=${r[0]} wsreal=${r[1]}
case $real in
"$wsreal" | "$wsreal"/*) ;;
*) fail 10 "Refusing $show: it is a symbolic link (or lies under one) that resolves to $real, outside $ws; links are followed only inside the workspace" ;;
esac
`

// writeScript replaces $f's final target with stdin atomically: the bytes
// land in a temp file beside the target and are renamed over it, so a reader
// never sees half a file. An existing file keeps its mode; a new one gets
// 644. When $want is a sha256, the rename happens only if the file still has
// that digest (the edit tool's lost-update guard), under a lock on the file.
// A failure removes the temp file and the directories this call created.
// Where perl exists (the image's perl-base), one perl process does all after
// the resolve, calling sha256sum only for an edit (perl-base has no SHA
// module); else coreutils do, with the same results and messages.
const writeScript = `set -u
f=$1 want=$2 ws=$3 show=$4
` + resolveScript + `
[ -d "$real" ] && fail 3 "Path is a directory: $show"
if command -v perl >/dev/null 2>&1; then
	exec perl -e '
	use strict;
	use Fcntl qw(O_WRONLY O_CREAT O_EXCL LOCK_EX);
	my ($real, $want, $show) = @ARGV;
	my ($dir) = $real =~ m{^(.*)/};
	my ($tmp, @made);
	sub fail {
		print STDERR "$_[1]\n";
		unlink $tmp if defined $tmp;
		for (reverse @made) { rmdir $_ or last }
		exit $_[0];
	}
	my $d = $dir;
	my @missing;
	while ($d ne "" && !-e $d && !-l $d) { unshift @missing, $d; $d =~ s{/[^/]*$}{} }
	@missing = ($dir) if !@missing && !-d $dir;
	for (@missing) {
		if (mkdir $_) { push @made, $_; next }
		my $err = "$!";
		# As mkdir -p: an existing directory will do; a name that cannot be
		# looked up (a link loop) is reported by why.
		if ($!{EEXIST}) { next if -d $_; $err = "$!" if !-e $_ }
		fail(3, "Cannot create the directory of $show: $err");
	}
	my @chars = ("A" .. "Z", "a" .. "z", "0" .. "9");
	my $out;
	until (defined $tmp) {
		my $name = "$dir/.oma-write." . join("", map { $chars[rand @chars] } 1 .. 8);
		if (sysopen($out, $name, O_WRONLY | O_CREAT | O_EXCL, 0600)) { $tmp = $name }
		elsif (!$!{EEXIST}) { fail(3, "Cannot write $show: $!") }
	}
	binmode STDIN;
	while (1) {
		my $n = sysread(STDIN, my $buf, 65536);
		defined $n or fail(3, "Cannot write $show: $!");
		last if $n == 0;
		for (my $off = 0; $off < $n;) {
			my $w = syswrite($out, $buf, $n - $off, $off);
			defined $w or fail(3, "Cannot write $show: $!");
			$off += $w;
		}
	}
	close $out or fail(3, "Cannot write $show: $!");
	my @st = stat $real;
	chmod(@st ? $st[2] & 07777 : 0644, $tmp);
	my $lock; # held until exit: a handle closed at the end of a block would unlock before the rename
	if ($want ne "") {
		open($lock, "<", $real) or fail(9, "file changed since it was read");
		flock($lock, LOCK_EX);
		my $pid = open(my $sum, "-|") // fail(3, "Cannot write $show: $!");
		# Digest the file the name holds now, not the one locked: a writer
		# that renamed over it while this waited for the lock has won.
		if (!$pid) { open(STDIN, "<", $real) and exec("sha256sum"); exit 127 }
		my ($have) = (join("", <$sum>) =~ /^([^ ]*)/);
		close $sum;
		$have eq $want or fail(9, "file changed since it was read");
	}
	rename($tmp, $real) or fail(3, "Cannot write $show: $!");
' -- "$real" "$want" "$show"
fi
dir=${real%/*}
made='' d=$dir
while [ ! -e "$d" ] && [ ! -L "$d" ]; do made=$d; d=${d%/*}; done
tmp=''
cleanup() {
	[ -z "$tmp" ] || rm -f -- "$tmp"
	[ -n "$made" ] || return 0
	d=$dir
	while rmdir -- "$d" 2>/dev/null && [ "$d" != "$made" ]; do d=${d%/*}; done
}
trap cleanup EXIT
reason() { printf '%s' "${1##*: }"; }
if [ -n "$made" ] || [ ! -d "$dir" ]; then
	err=$(mkdir -p -- "$dir" 2>&1) || fail 3 "Cannot create the directory of $show: $(reason "$err")"
fi
err=$(mktemp -- "$dir/.oma-write.XXXXXXXX" 2>&1) || fail 3 "Cannot write $show: $(reason "$err")"
tmp=$err
err=$(cat 2>&1 >"$tmp") || fail 3 "Cannot write $show: $(reason "$err")"
if [ -e "$real" ]; then chmod --reference="$real" -- "$tmp"; else chmod 644 -- "$tmp"; fi
if [ -n "$want" ]; then
	{ exec 9<"$real"; } 2>/dev/null || fail 9 "file changed since it was read"
	flock 9
	have=$(sha256sum <"$real")
	[ "${have%% *}" = "$want" ] || fail 9 "file changed since it was read"
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
	if err := t.writeFile(ctx, abs, p, content, ""); err != nil {
		return "", err
	}
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

// writeFile is one guest round trip; the content travels on stdin.
func (t *Toolbox) writeFile(ctx context.Context, abs, show, content, wantSHA string) error {
	res, err := t.shell(ctx, session.Command{Script: writeScript, Args: []string{abs, wantSHA, t.sess.Paths().Workspace, show}},
		session.ShellOptions{Stdin: strings.NewReader(content)})
	if err != nil {
		return fmt.Errorf("write %s: %w", show, err)
	}
	if res.ExitCode != 0 {
		return guestError("write", show, res)
	}
	return nil
}

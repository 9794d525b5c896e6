package bashproto

// perlSupervisor is the supervisor where perl exists: one process, so a
// call that ends at once costs perl's start, one fork and the command's
// bash, where the shell supervisor starts setsid, perl, bash, tail, sleep
// and rm. It does what supervisorScript does (see there) with the same
// lines, statuses and guards; only what is cheaper in one process differs:
//
//   - It leaves the caller's session by setsid(2), forking first when it
//     leads a process group (as setsid -w does: the parent waits and exits
//     with the supervisor's status; it renames itself, so that the kill
//     script, which waits for the supervisor to be gone, never waits for it).
//   - It relays the log itself, reading the log file it created (never its
//     path again), up to the size the log had when the command ended; the
//     command's end wakes it at once (SIGCHLD), so the relay adds no poll
//     to a call. While the command runs it looks every 10 ms.
//   - The timer is alarm(2), so a relay blocked on a host that does not
//     read cannot hold the kill back: output past that point is dropped.
//   - The log is created with O_EXCL (nothing may be at its fresh name),
//     and so is the kept copy, O_NONBLOCK too: a FIFO or symlink planted at
//     its name fails the copy instead of being followed or opened.
//   - After a kill it waits (at most a second) for the killed processes to
//     be gone, so that none is taken for a background process at the end.
//
// It is given, after Script's args, the syscall numbers of setsid, prctl
// and clock_gettime for the guest's architecture; Fcntl's and POSIX's
// constants are written out (the same on x86_64 and aarch64) because
// loading either module costs more than the whole fast path. The text goes
// inside single quotes in supervisorScript: it must hold none.
const perlSupervisor = `
my (undef, $id, $secs, $logdir, $keptdir, $maxlines, $maxbytes, $background, $nr_setsid, $nr_prctl, $nr_clock) = @ARGV;
my ($O_WRONLY, $O_CREAT, $O_EXCL, $O_APPEND, $O_NONBLOCK, $WNOHANG, $EINTR) = (1, 0x40, 0x80, 0x400, 0x800, 1, 4);
my ($aborted, $late, $ended, $cut, $dead, $status, $pid) = (0, 0, 0, 0, 0, 137, 0);
$SIG{USR1} = sub { $aborted = 1 };
$SIG{ALRM} = sub { $late = 1 };
$SIG{CHLD} = sub {};
$SIG{PIPE} = "IGNORE";
sub status { ($_[0] & 127) ? 128 + ($_[0] & 127) : $_[0] >> 8 }
if (syscall($nr_setsid + 0) < 0) {
  my $child = fork;
  defined $child or die "oma-sandbox: fork: $!\n";
  if ($child) {
    # Not a supervisor for the kill script, which waits for those to end.
    $0 = "oma-bash-setsid";
    while (waitpid($child, 0) != $child) { exit 1 if $! != $EINTR }
    exit status($?);
  }
  syscall($nr_setsid + 0);
}
my $reaper = syscall($nr_prctl + 0, 36, 1, 0, 0, 0) == 0;

my $in = do { local $/; <STDIN> } // "";
my ($secret, $command) = split /\n/, $in, 2;
($secret, $command) = ($secret // "", $command // "");
$command =~ s/\0.*//s;
if ($secret !~ /\A[0-9a-f]+\z/) { print STDERR "oma-sandbox: malformed bash request\n"; exit 91 }

sub mkdirs {
  my ($dir, $mode) = @_;
  return 1 if -d $dir;
  my ($up) = $dir =~ m{\A(.*[^/])/+[^/]+/*\z};
  mkdirs($up, 0777) if defined $up;
  mkdir($dir, $mode) || -d $dir;
}
my $log = "$logdir/$id.log";
my ($w, $r);
unless (mkdirs($logdir, 0700) && sysopen($w, $log, $O_WRONLY | $O_CREAT | $O_EXCL | $O_APPEND)
    && open($r, "<", "/proc/self/fd/" . fileno($w))) {
  print STDERR "oma-sandbox: cannot create the output log $log\n";
  exit 92;
}

# out writes to stdout. A relayed chunk (out($data, 1)) whose write the kill
# signal or the timer interrupts is dropped, and so is the rest of the log.
sub out {
  my ($data, $relayed) = @_;
  while (!$dead && length $data) {
    if ($relayed && ($aborted || $late)) { $cut = 1; return }
    my $n = syswrite(STDOUT, $data);
    if (defined $n) { substr($data, 0, $n) = "" } elsif ($! != $EINTR) { $dead = 1 }
  }
}
out("__OMA_DISPATCHED__:$secret\n");

pipe(my $cr, my $cw) or die "oma-sandbox: pipe: $!\n";
$pid = fork;
defined $pid or die "oma-sandbox: cannot start the command: $!\n";
if (!$pid) {
  $SIG{$_} = "DEFAULT" for qw(USR1 ALRM CHLD PIPE);
  syscall($nr_setsid + 0);
  $ENV{` + OwnerEnv + `} = $id;
  open(STDIN, "<&", $cr) && open(STDOUT, ">&", $w) && open(STDERR, ">&", $w)
    && exec { "/bin/bash" } "/bin/bash", "-c",
      q{` + CommandReader + `}, "bash";
  print STDERR "oma-sandbox: cannot run /bin/bash: $!\n";
  exit 127;
}
close $cr;
alarm($secs > 0 ? $secs : 1);
{
  my $text = "$command\n";
  while (length $text) {
    my $n = syswrite($cw, $text);
    if (defined $n) { substr($text, 0, $n) = "" } elsif ($! != $EINTR) { last }
  }
  close $cw;
}

my ($off, $nl) = (0, 0);
# relay copies the log to stdout up to its size now: a command that writes
# as fast as it is read cannot keep the supervisor from its other work.
sub relay {
  my $size = -s $r;
  while (!$cut && $off < $size) {
    my $n = sysread($r, my $buf, 65536);
    last unless $n;
    $off += $n;
    $nl += ($buf =~ tr/\n//);
    out($buf, 1);
  }
}
sub reap {
  while ((my $k = waitpid(-1, $WNOHANG)) > 0) {
    ($ended, $status) = (1, status($?)) if $k == $pid;
  }
}
sub now {
  my $ts = "\0" x 16;
  return time if syscall($nr_clock + 0, 1, $ts) != 0;
  my ($s, $ns) = unpack("q2", $ts);
  $s + $ns / 1e9;
}

my (%seen, %K, %T, %G, %S);
# The code for process trees and for a long log is compiled only when a
# call needs it: compiling it would cost a call that ends at once more
# than the rest of its run.
my $rare = q{
  # scan reads every process parent, group, session and start time.
  sub scan {
    (%K, %T, %G, %S) = ();
    opendir(my $d, "/proc") or return;
    for my $p (readdir $d) {
      next unless $p =~ /\A[1-9][0-9]*\z/;
      open(my $f, "<", "/proc/$p/stat") or next;
      my $line = <$f>;
      next unless defined $line && $line =~ /\A.*\) (.*)\z/s;
      my @a = split / /, $1;
      next if $a[0] eq "Z";
      push @{$K{$a[1]}}, $p;
      ($G{$p}, $S{$p}, $T{$p}) = @a[2, 3, 19];
    }
  }
  # tree returns the live processes at and below the roots, with their
  # start times.
  sub tree {
    my (%found, @q);
    @q = @_;
    while (@q) {
      my $p = shift @q;
      next if $p == 1 || $p == $$ || !defined $T{$p} || exists $found{$p};
      $found{$p} = $T{$p};
      push @q, @{$K{$p} || []};
    }
    %found;
  }
  # roots are the command, every recorded process still alive, and the
  # supervisor children: as a subreaper it adopts the command orphans.
  sub roots {
    ($pid, (grep { defined $T{$_} && $T{$_} eq $seen{$_} } keys %seen), @{$K{$$} || []});
  }
  sub track { scan(); %seen = tree(roots()) }
  sub tagged {
    my @t;
    opendir(my $d, "/proc") or return;
    for my $p (readdir $d) {
      next unless $p =~ /\A[1-9][0-9]*\z/ && open(my $f, "<", "/proc/$p/environ");
      my $env = do { local $/; <$f> } // "";
      push @t, $p if index("\0$env", "\0` + OwnerEnv + `=$id\0") >= 0;
    }
    @t;
  }
  sub alive {
    open(my $f, "<", "/proc/$_[0]/stat") or return 0;
    my $line = <$f>;
    defined $line && $line =~ /\A.*\) (\S)/s && $1 ne "Z";
  }
  sub killtree {
    my %stopped;
    for (1 .. 20) {
      scan();
      my @r = roots();
      push @r, grep { $G{$_} == $pid || $S{$_} == $pid } keys %G;
      my %found = tree(@r, tagged());
      my @new = grep { !$stopped{$_} } keys %found;
      last unless @new;
      kill "STOP", @new;
      $stopped{$_} = 1 for @new;
    }
    my @killed = keys %stopped;
    kill "KILL", @killed if @killed;
    for (1 .. 100) {
      reap();
      last unless grep { alive($_) } @killed;
      select(undef, undef, undef, 0.01);
    }
  }
  # keep copies the whole log to the kept copy, or says it could not.
  sub keep {
    my $kept = "$keptdir/$id.log";
    my $ok = mkdirs($keptdir, 0777) && sysopen(my $k, $kept, $O_WRONLY | $O_CREAT | $O_EXCL | $O_NONBLOCK) && sysseek($r, 0, 0);
    while ($ok) {
      my $n = sysread($r, my $buf, 1 << 20);
      $ok = defined $n or last;
      last unless $n;
      while ($ok && length $buf) {
        my $m = syswrite($k, $buf);
        if (defined $m) { substr($buf, 0, $m) = "" } else { $ok = $! == $EINTR }
      }
    }
    out("\n[The full output could not be saved to $kept]\n") unless $ok;
  }
  1;
};
sub rare { defined &killtree or eval $rare or die $@ }

my $kind = "exit";
my $next = now() + 0.1;
while (1) {
  relay();
  reap();
  last if $ended;
  if ($aborted) { rare(); killtree(); last }
  if ($late) { $kind = "timeout"; rare(); killtree(); last }
  if (now() >= $next) { rare(); track(); $next = now() + 0.1 }
  select(undef, undef, undef, 0.01);
}
alarm(0);
relay();

if ($nl + 1 > $maxlines || $off > $maxbytes) { rare(); keep() }

reap();
my $kids = "x";
if ($reaper && open(my $c, "<", "/proc/$$/task/$$/children")) { $kids = <$c> // "" }
if ($kids =~ /\S/) { rare(); track() } else { %seen = () }
if (%seen && $background eq "end") {
  killtree();
  out("\n[Background processes were killed: on this sandbox nothing outlives the call]\n");
  unlink $log;
} elsif (%seen) {
  out("\n[Background processes are still running; their output goes to $log]\n");
} else {
  unlink $log;
}
out("__OMA_TERMINAL__:$secret:$kind:$status\n");
exit $status;
`

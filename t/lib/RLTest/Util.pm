package RLTest::Util;
# What every other RLTest package needs: where the repository and the modules are, files,
# free loopback ports for TCP and UDP (reserved while the test file runs: test files may run at
# once), temporary directories (kept with RLTEST_KEEP=1), fresh keys, the window clock,
# wait_until and settle_value (a condition or a value awaited with a deadline instead of slept
# for), and processes: run_cmd runs a command with a deadline, start_port_child starts a server
# that prints its port, stop_child ends one that was started in the background, pid_alive tells
# a live process from a zombie.
# Core Perl only; depends on no other RLTest package.
use strict;
use warnings;
use Exporter 'import';
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Spec;
use File::Temp qw(tempdir);
use Fcntl qw(:flock);
use IO::Select;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);

our @EXPORT_OK = qw(repo_root module_so stream_module_so slurp spew conf_line_of free_port temp_dir kept_dirs
  run_cmd stop_child pid_alive worker_rss fresh_key wait_until settle_value avoid_window_edge wait_window_offset
  start_port_child);

our $KEEP = $ENV{RLTEST_KEEP} ? 1 : 0;    # RLTEST_KEEP=1: keep the temporary directories

# The repository root: this file is <root>/t/lib/RLTest/Util.pm.
sub repo_root { return dirname(dirname(dirname(dirname(abs_path(__FILE__))))) }

# The module under test: $RATELIMIT_SO, or build/ngx_http_ratelimit_module.so of this tree.
sub module_so {
    return $ENV{RATELIMIT_SO} if $ENV{RATELIMIT_SO};
    return File::Spec->catfile(repo_root(), 'build', 'ngx_http_ratelimit_module.so');
}

# The stream module under test: $RATELIMIT_STREAM_SO, or build/ngx_stream_ratelimit_module.so.
sub stream_module_so {
    return $ENV{RATELIMIT_STREAM_SO} if $ENV{RATELIMIT_STREAM_SO};
    return File::Spec->catfile(repo_root(), 'build', 'ngx_stream_ratelimit_module.so');
}

# ------------------------------------------------------------------ files

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or return '';
    local $/;
    my $s = <$fh>;
    close $fh;
    return $s // '';
}

sub spew {
    my ($f, $s) = @_;
    open my $fh, '>', $f or die "cannot write $f: $!";
    print $fh $s;
    close $fh;
}

# Line number (1-based) of the first line of file $f containing $marker.
sub conf_line_of {
    my ($f, $marker) = @_;
    my @lines = split /\n/, slurp($f), -1;
    for my $i (0 .. $#lines) {
        return $i + 1 if index($lines[$i], $marker) >= 0;
    }
    return undef;
}

# A temporary directory "$prefix-XXXXXX", removed at the end unless RLTEST_KEEP=1 (then
# kept_dirs lists it, and RLTest prints it at the end).
my @KEPT;
sub temp_dir {
    my ($prefix) = @_;
    my $dir = tempdir("$prefix-XXXXXX", TMPDIR => 1, CLEANUP => !$KEEP);
    push @KEPT, $dir if $KEEP;
    return $dir;
}

sub kept_dirs { @KEPT }

# A loopback port (TCP and UDP) free now, and no other test's until this process ends: test
# files run at once (prove -j) each take theirs, and a port a test keeps free on purpose (an
# upstream or a Redis that is not there) stays so. A port is reserved by a lock (flock) on a
# file named after it in $TMPDIR/rltest-ports, which goes with the process however it ends.
# The ports come from below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768
# and up by default): no connection's local port, nor a port bound to 0, takes one between
# its choice here and its server's bind.
our ($PORT_LO, $PORT_HI) = (20000, 32767);
my %RESERVED;    # port -> its lock file, open
sub free_port {  # (free_port(udp => 1), as stream tests ask: every port is free for both)
    my $dir = File::Spec->catdir(File::Spec->tmpdir, 'rltest-ports');
    mkdir $dir, 0777;
    for (1 .. 1000) {
        my $p = $PORT_LO + int(rand($PORT_HI - $PORT_LO + 1));
        next if $RESERVED{$p};
        open my $lock, '>>', "$dir/$p" or die "cannot open $dir/$p: $!";
        if (!flock($lock, LOCK_EX | LOCK_NB)) { close $lock; next }
        my @free = map { IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $p, Proto => $_,
            $_ eq 'tcp' ? (Listen => 1) : (), ReuseAddr => 0) } qw(tcp udp);
        if (grep { !$_ } @free) { close $lock; next }
        close $_ for @free;
        $RESERVED{$p} = $lock;
        return $p;
    }
    die "no free port in $PORT_LO..$PORT_HI\n";
}

# A new client key each call: k1, k2, ... (or PREFIX1, ...).
my $FRESH = 0;
sub fresh_key { my ($prefix) = @_; $FRESH++; return ($prefix // 'k') . $FRESH }

# wait_until($cond, %o): a state a test would otherwise sleep for (what a response set off and
# nginx, Redis or a backend finishes after it: a settle, a slot given back, a sync round, a log
# line), awaited: calls $cond->() every o{every} seconds (0.02) until it returns a true value,
# for up to o{timeout} seconds (3). Returns that value, or the last false one once the deadline
# passed: the assertion that follows fails then, as it would on a wrong state.
sub wait_until {
    my ($cond, %o) = @_;
    my $deadline = time + ($o{timeout} // 3);
    while (1) {
        my $v = $cond->();
        return $v if $v || time > $deadline;
        sleep $o{every} // 0.02;
    }
}

# settle_value($get, $want, %o): a value awaited (wait_until) until $get->() returns $want
# (compared as strings), for up to o{timeout} seconds (3), then read once more o{after} seconds
# (0.2) later, so that a value only passing by on its way elsewhere is not taken. Returns the
# last value read: $want if it came and stayed.
sub settle_value {
    my ($get, $want, %o) = @_;
    my $got;
    wait_until(sub { $got = $get->(); return defined $got && $got eq $want }, timeout => $o{timeout} // 3);
    return $got unless defined $got && $got eq $want;
    sleep $o{after} // 0.2;
    return $get->();
}

# ---------------------------------------------------------------- processes

# True while $pid exists and is not a zombie (PID 1 here may reap slowly).
sub pid_alive {
    my ($pid) = @_;
    return 0 unless $pid && kill 0, $pid;
    return 0 if slurp("/proc/$pid/stat") =~ /^\d+ \(.*\) Z /s;
    return 1;
}

# Resident memory of a process in kB (VmRSS), 0 if gone.
sub worker_rss {
    my ($pid) = @_;
    return slurp("/proc/$pid/status") =~ /^VmRSS:\s+(\d+)\s+kB/m ? $1 : 0;
}

my %RUNNING;    # pid -> the process that waits for it in run_cmd

# run_cmd($secs, @cmd) -> (exit code, output, timed out): runs @cmd (no shell) with stdin
# from /dev/null and stdout and stderr captured together, and waits for it, at most $secs
# seconds. The command runs in its own process group; at the deadline that whole group is
# killed (SIGKILL), the exit code is 137 and the output ends with a line saying so. The
# exit code of a command ended by a signal is 128 + the signal, 127 if it could not be run.
# A daemon the command leaves behind holding the output open (nginx, daemonized) does not
# keep run_cmd waiting: once the command itself has exited, what it wrote is read and that
# is all. If the caller dies meanwhile (the test file's own timeout), the group is killed
# first; a command still running when its caller is gone dies of SIGALRM soon after the
# deadline (the timer survives exec).
sub run_cmd {
    my ($secs, @cmd) = @_;
    die "run_cmd: no deadline\n" unless defined $secs && $secs > 0;
    die "run_cmd: no command\n" unless @cmd;
    pipe(my $r, my $w) or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        close $r;
        setpgrp(0, 0);
        open STDIN, '<', '/dev/null';
        open STDOUT, '>&', $w;
        open STDERR, '>&', $w;
        close $w;
        $SIG{$_} = 'DEFAULT' for qw(ALRM PIPE TERM INT);
        alarm(int($secs) + 5);
        { no warnings 'exec'; exec { $cmd[0] } @cmd }
        print STDERR "run_cmd: cannot run $cmd[0]: $!\n";
        POSIX::_exit(127);
    }
    close $w;
    $RUNNING{$pid} = $$;
    binmode $r;
    my $deadline = time + $secs;
    my ($out, $status, $timed_out) = ('', undef, 0);
    my $kill = sub { kill 'KILL', -$pid; kill 'KILL', $pid };
    my $ok = eval {
        my $sel = IO::Select->new($r);
        my $open = 1;
        while (1) {
            if (!defined $status) {
                my $got = waitpid($pid, WNOHANG);
                $status = $got == $pid ? $? : -1 if $got != 0;    # -1: reaped elsewhere
            }
            last if defined $status && !$open;
            my $left = $deadline - time;
            if ($left <= 0) {
                $kill->();
                if (!defined $status) { waitpid($pid, 0); $status = $? }
                $timed_out = 1;
                last;
            }
            if (!$open) { sleep 0.005; next }    # output closed, the command not reaped yet
            # While the command runs, look at it again every 50 ms; once it has exited, take
            # what is left in the pipe and stop.
            my $wait = defined $status ? 0 : $left < 0.05 ? $left : 0.05;
            if ($sel->can_read($wait)) {
                my $n = sysread($r, $out, 65536, length $out);
                $open = 0 if defined $n ? $n == 0 : !$!{EINTR} && !$!{EAGAIN};
            } elsif (defined $status) {
                $open = 0;
            }
        }
        1;
    };
    my $err = $@;
    if (!$ok) {
        $kill->();
        waitpid($pid, 0) unless defined $status;
    }
    delete $RUNNING{$pid};
    close $r;
    die $err unless $ok;
    $out .= "\nrun_cmd: killed after ${secs}s: @cmd\n" if $timed_out;
    my $rc = $timed_out ? 137 : $status < 0 ? -1 : $status & 127 ? 128 + ($status & 127) : $status >> 8;
    return ($rc, $out, $timed_out);
}

# start_port_child($what, @cmd) -> (pid, port): runs @cmd in the background (signals default,
# no alarm inherited) and reads the loopback port it prints first, alone on a line (20 s at
# most); if none comes, the child is killed and it dies naming $what.
sub start_port_child {
    my ($what, @cmd) = @_;
    pipe(my $r, my $w) or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        close $r;
        open STDOUT, '>&', $w or POSIX::_exit(1);
        close $w;
        $SIG{$_} = 'DEFAULT' for qw(ALRM TERM INT PIPE);
        alarm 0;
        { no warnings 'exec'; exec { $cmd[0] } @cmd }
        POSIX::_exit(127);
    }
    close $w;
    my $line = '';
    my $sel = IO::Select->new($r);
    while ($line !~ /\n/ && $sel->can_read(20)) {
        last unless sysread($r, $line, 64, length $line);
    }
    close $r;
    my ($port) = $line =~ /^(\d+)\n/;
    if (!$port) {
        stop_child($pid, 'KILL', 1);
        die "$what did not start ('$line')\n";
    }
    return ($pid, $port);
}

# Ends a child process started in the background (redis-server, a proxy): $sig (TERM), then
# SIGKILL if it is still there after $grace seconds (3); always reaps it.
sub stop_child {
    my ($pid, $sig, $grace) = @_;
    return unless $pid;
    kill $sig // 'TERM', $pid;
    my $deadline = time + ($grace // 3);
    while (time < $deadline) {
        my $got = waitpid($pid, WNOHANG);
        return if $got == $pid || $got < 0;
        sleep 0.01;
    }
    kill 'KILL', $pid;
    waitpid($pid, 0);
}

END {
    # a run_cmd interrupted by exit (not by die): its command does not outlive the test
    my @left = grep { $RUNNING{$_} == $$ } keys %RUNNING;
    kill 'KILL', map { (-$_, $_) } @left if @left;
}

# ---------------------------------------------------------------- time

# If fewer than $margin seconds remain in the current window of $period seconds
# (windows aligned to multiples of $period since the epoch), sleeps into the next one.
sub avoid_window_edge {
    my ($period, $margin) = @_;
    my $now  = time;
    my $left = $period - ($now - $period * int($now / $period));
    sleep $left + 0.05 if $left < $margin;
}

# Sleeps until ($now mod $period) == $offset (next occurrence).
sub wait_window_offset {
    my ($period, $offset) = @_;
    my $now = time;
    my $pos = $now - $period * int($now / $period);
    my $d = $offset - $pos;
    $d += $period if $d < 0.02;
    sleep $d;
}

1;

package RLTest::Util;
# What every other RLTest package needs: where the repository and the module are, files,
# free loopback ports, temporary directories (kept with RLTEST_KEEP=1), fresh keys, the
# window clock, and processes.
# Core Perl only; depends on no other RLTest package.
use strict;
use warnings;
use Exporter 'import';
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Spec;
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);

our @EXPORT_OK = qw(repo_root module_so slurp spew conf_line_of free_port temp_dir kept_dirs
  run_capture pid_alive worker_rss fresh_key avoid_window_edge wait_window_offset);

our $KEEP = $ENV{RLTEST_KEEP} ? 1 : 0;    # RLTEST_KEEP=1: keep the temporary directories

# The repository root: this file is <root>/t/lib/RLTest/Util.pm.
sub repo_root { return dirname(dirname(dirname(dirname(abs_path(__FILE__))))) }

# The module under test: $RATELIMIT_SO, or build/ngx_http_ratelimit_module.so of this tree.
sub module_so {
    return $ENV{RATELIMIT_SO} if $ENV{RATELIMIT_SO};
    return File::Spec->catfile(repo_root(), 'build', 'ngx_http_ratelimit_module.so');
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

# A loopback TCP port free now.
sub free_port {
    my $s = IO::Socket::INET->new(
        LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp', Listen => 1, ReuseAddr => 0,
    ) or die "cannot bind: $!";
    my $p = $s->sockport;
    close $s;
    return $p;
}

# A new client key each call: k1, k2, ... (or PREFIX1, ...).
my $FRESH = 0;
sub fresh_key { my ($prefix) = @_; $FRESH++; return ($prefix // 'k') . $FRESH }

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

# (exit code, output) of @cmd, stdout and stderr together.
sub run_capture {
    my (@cmd) = @_;
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if (!$pid) {
        open STDERR, '>&', \*STDOUT;
        exec @cmd or POSIX::_exit(127);
    }
    my $out = '';
    my $deadline = time + 30;
    local $/;
    $out = <$fh> // '';
    close $fh;
    my $rc = $? >> 8;
    return ($rc, $out);
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

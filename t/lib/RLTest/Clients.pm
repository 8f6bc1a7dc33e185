package RLTest::Clients;
# Traffic for the tests: sequential requests (statuses) and many client processes at once
# (run_clients), and what their results hold (codes, tally).
use strict;
use warnings;
use Exporter 'import';
use IO::Select;
use POSIX ();
use Time::HiRes qw(time sleep);
use RLTest::Http qw(http_request);
use RLTest::KeepAlive;

our @EXPORT_OK = qw(statuses run_clients codes tally);

# statuses($nginx, $path, $n, \%headers) -> list of the $n statuses of sequential requests
sub statuses {
    my ($n, $path, $count, $hdrs) = @_;
    my @s;
    for (1 .. $count) {
        my ($st) = $n->get($path, $hdrs);
        push @s, $st // 'ERR';
    }
    return @s;
}

# run_clients($port, $path_or_coderef, $clients, $per_client, %opts)
# $port may be an arrayref: client c then talks to $port->[c % n].
# Forks $clients processes; each sends $per_client GET requests (keep-alive unless
# keepalive => 0) and reports statuses. $path may be a coderef ($client, $i) -> path.
# opts: headers => {}, record => 'header-name' (counts values of that response header).
# until => epoch time after which each client stops early; during => coderef run by the
# parent while the clients run (they start 0.3s after the call).
# Returns a hashref: status => count, plus {':values'}{value} => count when record is set,
# {':errors'} => number of failed requests, {':max_ms'} => the slowest request.
sub run_clients {
    my ($port, $path, $clients, $per_client, %o) = @_;
    my $ka = $o{keepalive} // 1;
    my $start_at = time + 0.3;
    my @kids;
    for my $c (0 .. $clients - 1) {
        pipe(my $r, my $w) or die "pipe: $!";
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            close $r;
            $SIG{ALRM} = 'DEFAULT';    # a client stuck anywhere ends after 60 s
            alarm 60;
            my @res;
            eval {
                my $wait = $start_at - time;
                sleep $wait if $wait > 0;
                my $to = ref $port ? $port->[ $c % @$port ] : $port;
                my $conn = $ka ? RLTest::KeepAlive->new($to) : undef;
                for my $i (0 .. $per_client - 1) {
                    my $p = ref $path ? $path->($c, $i) : $path;
                    my $t0 = time;
                    my ($st, $h) = $ka ? $conn->get($p, $o{headers}) : http_request($to, $p, $o{headers});
                    my $ms = int((time - $t0) * 1000);
                    my $v = $o{record} ? ($h->{ lc $o{record} } // '') : '';
                    push @res, ($st // 'ERR') . "\t$ms\t$v";
                    last if $o{until} && time > $o{until};
                }
                $conn->close if $conn;
                1;
            };
            print $w join("\n", @res), "\n" if @res;
            close $w;
            POSIX::_exit(0);
        }
        close $w;
        push @kids, [$pid, $r];
    }
    $o{during}->() if $o{during};  # e.g. a fault injected while the clients run
    # The clients' reports, read as they come; a client still running 5 s after its own
    # alarm should have ended it is killed, and what it did is lost.
    my $deadline = $start_at + 65;
    $deadline = time + 5 if $deadline < time + 5;
    my $sel = IO::Select->new(map { $_->[1] } @kids);
    my %data = map { fileno($_->[1]) => '' } @kids;
    while ($sel->count) {
        my $left = $deadline - time;
        last if $left <= 0;
        for my $fh ($sel->can_read($left)) {
            my $n = sysread($fh, $data{ fileno $fh }, 65536, length $data{ fileno $fh });
            next if !defined $n && $!{EINTR};
            $sel->remove($fh) unless $n;
        }
    }
    my %count = (':errors' => 0);
    for my $k (@kids) {
        my ($pid, $r) = @$k;
        my $data = $data{ fileno $r };
        close $r;
        kill 'KILL', $pid if waitpid($pid, POSIX::WNOHANG()) == 0 && time >= $deadline;
        waitpid $pid, 0;
        for my $line (split /\n/, $data) {
            my ($st, $ms, $v) = split /\t/, $line, 3;
            $count{$st}++;
            $count{':max_ms'} = $ms if !defined $count{':max_ms'} || $ms > $count{':max_ms'};
            $count{':errors'}++ if $st eq 'ERR';
            $count{':values'}{ $v // '' }++ if $o{record};
        }
    }
    return \%count;
}

# The statuses seen in a run_clients result: '200,429'.
sub codes { my ($r) = @_; return join ',', sort grep { !/^:/ } keys %$r }

# Recorded "uri key status ..." values of a run_clients result -> { "uri key" => { status => n } }.
sub tally {
    my ($r) = @_;
    my %t;
    for my $v (keys %{ $r->{':values'} || {} }) {
        my ($uri, $k, $st) = split / /, $v;
        $t{"$uri $k"}{ $st // '' } += $r->{':values'}{$v};
    }
    return \%t;
}

1;

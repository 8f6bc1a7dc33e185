package RLTest::Backend;
# A small upstream server for the tests (nginx proxy_passes to it): one forked process, a
# non-blocking IO::Select loop on a free loopback port, stopped at the end of the test file
# (and by itself if the test process goes away, or after RLTEST_TIMEOUT + 30 seconds).
#
#   my $b = RLTest::Backend->start;          (or start_backend() after `use RLTest::Backend`)
#   $b->port, $b->addr ('127.0.0.1:PORT'), $b->pid
#
# Any request but /_ctl/... is held: `GET /hold?ms=N&key=K` (any path) is answered N ms
# (default 0) after it came, 200 (or &status=NNN) with the body "[K]\n" and Connection: close.
# The answer is shaped by more arguments (each optional; hdr= and trailer= may repeat):
#   &hdr=Name:value      a response header (e.g. hdr=X-Tokens:123)
#   &bytes=N             a body of exactly N bytes (the pattern "[K]\n" repeated and cut; up
#                        to 256 MB) instead of "[K]\n"
#   &chunked=1           Transfer-Encoding: chunked (chunks of 16 KB at most)
#   &trailer=Name:value  a field of the HTTP/1.1 chunked trailer section (implies chunked=1;
#                        announced in a Trailer header)
# A name is letters, digits and '-', a value printable ASCII; a malformed one is a 400.
# Per key the backend records the requests in progress now (cur), the most seen at once (max),
# the ones answered (served), the ones whose connection the peer closed before the answer
# (aborted: nginx gave up: its client went away, proxy_read_timeout fired, ...), the answers
# whose connection the peer closed before they were all written (cut: e.g. a large body
# nginx stopped reading because its client went away), all that came (started), which nginx
# worker sent the ones in progress (the X-Worker request header, e.g.
# proxy_set_header X-Worker $pid: holders), and the time spent at each level of cur (levels:
# level => seconds, counted from the key's first request or its last reset).
#
#   $b->stats($key)     -> { cur, max, served, aborted, cut, started, holders => { pid => n },
#                            levels => { level => seconds } } (zeros for a key never seen)
#   $b->reset([$key])   forgets the counters (of one key, or all); requests in progress stay
#                       counted in cur, max starts again from cur. With a key, returns its
#                       stats as they were just before (read and reset at once)
#   $b->release([$key]) answers now the requests held (of one key, or all)
#   $b->wait_for($key, sub { my $s = shift; ... } [, $timeout]) -> the stats that satisfied
#                       the condition, or undef after $timeout seconds (5)
#   $b->wait_cur($key, $n [, $timeout]) -> true once cur of $key is $n
#   $b->share_at($key, $level) -> the share of the time with requests of $key in progress
#                       (cur > 0) spent at exactly $level
#   $b->stop
# Slow requests through nginx (one connection each, Connection: close):
#   $b->enter($port, $path, $key [, ms => 600000, headers => {}]) sends GET
#                       $path?...&key=$key&ms=... to nginx on $port and waits until the backend
#                       has it ({ held => 1, sock, key }) or nginx answered first ({ held => 0,
#                       status, h, body }: rejected); { held => 0, status => 'TIMEOUT' } after 5 s
#   $b->finish($key, @entries) releases $key and returns the statuses nginx then answered the
#                       held entries with ('200 200')
#   send_request($port, $path [, \%headers]) -> socket; read_response($sock [, $timeout]) ->
#                       (status or 'NONE', \%headers, body), the socket closed
# The control requests are GET /_ctl/stats?key=K, /_ctl/reset[?key=K], /_ctl/release[?key=K].
use strict;
use warnings;
use Exporter 'import';
use IO::Select;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use RLTest::Http qw(http_request request_text parse_head);
use RLTest::Util qw(wait_until);

our @EXPORT_OK = qw(start_backend send_request read_response);

my @ALL;

sub start_backend { return __PACKAGE__->start(@_) }

sub start {
    my ($class, %o) = @_;
    my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp',
        Listen => 1024, ReuseAddr => 1) or die "backend: cannot listen: $!";
    my $port = $listen->sockport;
    my $parent = $$;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        $SIG{$_} = 'DEFAULT' for qw(TERM INT PIPE);
        $SIG{PIPE} = 'IGNORE';
        $SIG{ALRM} = sub { POSIX::_exit(0) };
        alarm(($ENV{RLTEST_TIMEOUT} || 150) + 30);
        eval { _serve($listen, $parent) };
        POSIX::_exit(0);
    }
    close $listen;
    my $self = bless { port => $port, pid => $pid, creator => $$ }, $class;
    push @ALL, $self;
    my $deadline = time + 5;
    until (defined((http_request($port, '/_ctl/stats?key='))[0])) {
        die "backend did not answer within 5s\n" if time > $deadline;
        sleep 0.02;
    }
    return $self;
}

sub port { $_[0]{port} }
sub pid  { $_[0]{pid} }
sub addr { "127.0.0.1:$_[0]{port}" }

sub _esc { my ($s) = @_; $s //= ''; $s =~ s/([^A-Za-z0-9_.~-])/sprintf('%%%02X', ord $1)/ge; return $s }
sub _unesc { my ($s) = @_; $s //= ''; $s =~ tr/+/ /; $s =~ s/%([0-9A-Fa-f]{2})/chr hex $1/ge; return $s }

sub _ctl {
    my ($self, $what, $key) = @_;
    my $path = "/_ctl/$what" . (defined $key ? '?key=' . _esc($key) : '');
    my ($st, undef, $body) = http_request($self->{port}, $path);
    die "backend: $path: " . ($st // 'no answer') . "\n" unless ($st // '') eq '200';
    return $body;
}

sub stats {
    my ($self, $key) = @_;
    return _parse_stats($self->_ctl('stats', $key // ''));
}

sub _parse_stats {
    my ($text) = @_;
    my %s = map { $_ => 0 } qw(cur max served aborted cut started);
    $s{holders} = {};
    $s{levels}  = {};
    for my $line (split /\n/, $text) {
        my ($k, $v) = split / /, $line, 2;
        next unless defined $v;
        if ($k eq 'holders' || $k eq 'levels') {
            $s{$k} = { map { split /:/, $_, 2 } grep { length } split /,/, $v };
        } else {
            $s{$k} = $v;
        }
    }
    return \%s;
}

sub reset {
    my ($self, $key) = @_;
    my $before = $self->_ctl('reset', $key);
    return defined $key ? _parse_stats($before) : 1;
}
sub release { my ($self, $key) = @_; $self->_ctl('release', $key); return 1 }

sub wait_for {
    my ($self, $key, $cond, $timeout) = @_;
    return wait_until(sub { my $s = $self->stats($key); return $cond->($s) ? $s : undef }, timeout => $timeout // 5);
}

sub wait_cur {
    my ($self, $key, $n, $timeout) = @_;
    return defined $self->wait_for($key, sub { $_[0]{cur} == $n }, $timeout);
}

sub share_at {
    my ($self, $key, $level) = @_;
    my $lv = $self->stats($key)->{levels};
    my $busy = 0;
    $busy += $lv->{$_} for grep { $_ > 0 } keys %$lv;
    return $busy > 0 ? ($lv->{$level} // 0) / $busy : 0;
}

# ------------------------------------------------------ slow requests through nginx

sub send_request {
    my ($port, $path, $hdrs) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5)
      or die "connect to $port: $!";
    $s->autoflush(1);
    local $SIG{PIPE} = 'IGNORE';
    print {$s} request_text('GET', $path, $hdrs, 0);
    return $s;
}

sub read_response {
    my ($s, $timeout) = @_;
    my $deadline = time + ($timeout // 10);
    my $sel = IO::Select->new($s);
    my $buf = '';
    while (1) {
        my $left = $deadline - time;
        last if $left <= 0 || !$sel->can_read($left);
        my $n = sysread($s, $buf, 65536, length $buf);
        last unless $n;
    }
    close $s;
    my $i = index($buf, "\r\n\r\n");
    return ('NONE', {}, $buf) if $i < 0;
    my ($st, $h) = parse_head(substr($buf, 0, $i));
    return ($st, $h, substr($buf, $i + 4));
}

sub enter {
    my ($self, $port, $path, $key, %o) = @_;
    my $before = $self->stats($key)->{started};
    my $s = send_request($port, $path . ($path =~ /\?/ ? '&' : '?') . "key=$key&ms=" . ($o{ms} // 600000), $o{headers});
    my $sel = IO::Select->new($s);
    my $deadline = time + 5;
    while (time < $deadline) {
        return { held => 1, sock => $s, key => $key } if $self->stats($key)->{started} > $before;
        if ($sel->can_read(0.02)) {
            my ($st, $h, $body) = read_response($s, 5);
            return { held => 0, status => $st, h => $h, body => $body };
        }
    }
    close $s;
    return { held => 0, status => 'TIMEOUT', h => {} };
}

sub finish {
    my ($self, $key, @entries) = @_;
    $self->release($key);
    return join ' ', map { $_->{held} ? (read_response($_->{sock}))[0] : $_->{status} } @entries;
}

sub stop {
    my ($self) = @_;
    local $?;    # waitpid must not change the exit code of the test file (this runs from END)
    return if $self->{stopped} || $self->{creator} != $$;
    $self->{stopped} = 1;
    kill 'TERM', $self->{pid};
    my $deadline = time + 3;
    while (time < $deadline) {
        my $got = waitpid($self->{pid}, WNOHANG);
        return if $got == $self->{pid} || $got < 0;
        sleep 0.01;
    }
    kill 'KILL', $self->{pid};
    waitpid($self->{pid}, 0);
}

sub stop_all { $_->stop for @ALL }

END { stop_all() }

# ------------------------------------------------------------------ the server

# 'Name:value' pairs as header lines
sub _fields { return join '', map { my ($n, $v) = split /:/, $_, 2; "$n: $v\r\n" } @_ }

sub _serve {
    my ($listen, $parent) = @_;
    $listen->blocking(0);
    my $sel = IO::Select->new($listen);
    my (%conn, %cur, %max, %served, %aborted, %cut, %started, %since, %lv);
    # conn: fileno => { sock, in, out, key, due, worker, state: 'read'|'hold'|'write' }

    my $level = sub {    # cur of $k changes by $d, with the time at the old level counted
        my ($k, $d) = @_;
        my $now = time;
        my $c = $cur{$k} // 0;
        $lv{$k}{$c} += $now - $since{$k} if defined $since{$k};
        $since{$k} = $now;
        $cur{$k} = $c + $d;
        $max{$k} = $cur{$k} if $cur{$k} > ($max{$k} // 0);
    };
    my $drop = sub {
        my ($c) = @_;
        $sel->remove($c->{sock});
        delete $conn{ fileno $c->{sock} };
        close $c->{sock};
    };
    my $answer = sub {
        my ($c, $status, $body, $extra, $trailers) = @_;
        my $reason = { 200 => 'OK', 400 => 'Bad Request', 404 => 'Not Found' }->{$status} // 'Status';
        my $head = "HTTP/1.1 $status $reason\r\nContent-Type: text/plain\r\nConnection: close\r\n" . ($extra // '');
        if ($trailers) {    # chunked, then the trailer section (maybe empty)
            my $out = "${head}Transfer-Encoding: chunked\r\n";
            $out .= 'Trailer: ' . join(', ', map { (split /:/, $_, 2)[0] } @$trailers) . "\r\n" if @$trailers;
            $out .= "\r\n";
            for (my $i = 0; $i < length $body; $i += 16384) {
                my $piece = substr($body, $i, 16384);
                $out .= sprintf("%x\r\n", length $piece) . "$piece\r\n";
            }
            $c->{out} = $out . "0\r\n" . _fields(@$trailers) . "\r\n";
        } else {
            $c->{out} = "${head}Content-Length: " . length($body) . "\r\n\r\n$body";
        }
        $c->{state} = 'write';
    };
    my $stats_text = sub {
        my ($k) = @_;
        my $now = time;
        my %l = %{ $lv{$k} || {} };
        $l{ $cur{$k} // 0 } += $now - $since{$k} if defined $since{$k};
        my %h;
        $h{ $_->{worker} }++ for grep { $_->{state} eq 'hold' && $_->{key} eq $k } values %conn;
        return join '', map { "$_\n" }
          'cur ' . ($cur{$k} // 0), 'max ' . ($max{$k} // 0), 'served ' . ($served{$k} // 0),
          'aborted ' . ($aborted{$k} // 0), 'cut ' . ($cut{$k} // 0), 'started ' . ($started{$k} // 0),
          'holders ' . join(',', map { "$_:$h{$_}" } sort keys %h),
          'levels ' . join(',', map { sprintf '%d:%.6f', $_, $l{$_} } sort { $a <=> $b } keys %l);
    };
    my $request = sub {    # a complete request head in $c->{in}
        my ($c) = @_;
        my ($target) = $c->{in} =~ m{^[A-Z]+ (\S+) HTTP/}
          or return $answer->($c, 404, "bad request\n");
        my ($path, $query) = split /\?/, $target, 2;
        my (%arg, @hdr, @trailer);
        for (split /&/, $query // '') {
            my ($k, $v) = split /=/, $_, 2;
            ($k, $v) = (_unesc($k), _unesc($v));
            push @hdr, $v if $k eq 'hdr';
            push @trailer, $v if $k eq 'trailer';
            $arg{$k} //= $v;
        }
        if ($path =~ m{^/_ctl/(\w+)$}) {
            my $what = $1;
            my $k = $arg{key};
            my @keys = defined $k ? ($k) : keys %{ { map { $_ => 1 } keys %cur, keys %started } };
            if ($what eq 'stats') {
                return $answer->($c, 200, $stats_text->($k // ''));
            } elsif ($what eq 'reset') {
                my $before = $stats_text->($k // '');    # what was counted until now, at once
                for my $kk (@keys) {
                    delete $lv{$kk};
                    $since{$kk} = ($cur{$kk} // 0) > 0 ? time : undef;
                    $max{$kk} = $cur{$kk} // 0;
                    $served{$kk} = $aborted{$kk} = $cut{$kk} = $started{$kk} = 0;
                }
                return $answer->($c, 200, $before);
            } elsif ($what eq 'release') {
                my $now = time;
                $_->{due} = $now for grep { $_->{state} eq 'hold' && (!defined $k || $_->{key} eq $k) } values %conn;
                return $answer->($c, 200, "ok\n");
            }
            return $answer->($c, 404, "unknown control\n");
        }
        for (@hdr, @trailer) {
            return $answer->($c, 400, "bad field\n") unless /^[A-Za-z0-9-]+:[\x20-\x7e]*$/;
        }
        return $answer->($c, 400, "bad bytes\n")
          if defined $arg{bytes} && !($arg{bytes} =~ /^\d{1,9}$/ && $arg{bytes} <= 256 << 20);
        my $k = $arg{key} // '';
        $c->{extra}    = _fields(@hdr);
        $c->{trailers} = @trailer || ($arg{chunked} // '') eq '1' ? \@trailer : undef;
        $c->{bytes}    = $arg{bytes};
        my ($worker) = $c->{in} =~ /^X-Worker:\s*(\S+)/mi;
        $c->{key}    = $k;
        $c->{worker} = $worker // '-';
        $c->{status} = ($arg{status} // '') =~ /^([1-5]\d\d)$/ ? $1 : 200;
        $c->{due}    = time + (($arg{ms} // 0) =~ /^(\d+)$/ ? $1 : 0) / 1000;
        $c->{state}  = 'hold';
        $started{$k}++;
        $level->($k, 1);
    };

    while (1) {
        exit 0 if getppid() != $parent;
        # the nearest due time of a held request bounds the wait
        my $now = time;
        my $wait = 0.2;
        for my $c (values %conn) {
            next unless $c->{state} eq 'hold';
            my $d = $c->{due} - $now;
            $wait = $d if $d < $wait;
        }
        $wait = 0 if $wait < 0;
        my $wsel = IO::Select->new(map { $_->{sock} } grep { $_->{state} eq 'write' } values %conn);
        my ($r, $w) = IO::Select->select($sel, $wsel, undef, $wait);
        for my $fh (@{ $r || [] }) {
            if ($fh == $listen) {
                while (my $s = $listen->accept) {
                    $s->blocking(0);
                    $sel->add($s);
                    $conn{ fileno $s } = { sock => $s, in => '', out => '', state => 'read' };
                }
                next;
            }
            my $c = $conn{ fileno $fh } or next;
            my $n = sysread($fh, my $buf, 65536);
            next if !defined $n && ($!{EAGAIN} || $!{EINTR});
            if (!$n) {    # the peer closed (or reset) the connection
                if ($c->{state} eq 'hold') {
                    $level->($c->{key}, -1);
                    $aborted{ $c->{key} }++;
                }
                $cut{ $c->{key} }++ if $c->{answering} && length $c->{out};
                $drop->($c);
                next;
            }
            next unless $c->{state} eq 'read';
            $c->{in} .= $buf;
            $request->($c) if index($c->{in}, "\r\n\r\n") >= 0;
        }
        # held requests whose time has come
        $now = time;
        for my $c (grep { $_->{state} eq 'hold' && $_->{due} <= $now } values %conn) {
            $level->($c->{key}, -1);
            $served{ $c->{key} }++;
            my $body = "[$c->{key}]\n";
            if (defined $c->{bytes}) {
                $body = $c->{bytes} ? substr($body x (int($c->{bytes} / length($body)) + 1), 0, $c->{bytes}) : '';
            }
            $answer->($c, $c->{status}, $body, "X-Backend-Key: $c->{key}\r\n$c->{extra}", $c->{trailers});
            $c->{answering} = 1;
        }
        # answers: written as far as the socket takes them, closed once written
        for my $c (grep { $_->{state} eq 'write' } values %conn) {
            my $n = syswrite($c->{sock}, $c->{out});
            if (!defined $n) {
                next if $!{EAGAIN} || $!{EINTR};
                $cut{ $c->{key} }++ if $c->{answering};
                $drop->($c);
                next;
            }
            substr($c->{out}, 0, $n) = '';
            next if length $c->{out};
            shutdown($c->{sock}, 1);
            $drop->($c);
        }
    }
}

1;

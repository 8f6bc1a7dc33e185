package RLTest::Grpc;
# A gRPC upstream for the tests (nginx grpc_passes to it) and a gRPC client, both
# t/lib/grpc_tokens.py run by Debian's /usr/bin/python3 with python3-grpcio (see that file
# for the requests: "tokens=N" ends a call with the trailer "x-tokens: N").
#
#   my $why = grpc_missing();      undef, or why the tests cannot run (to skip with)
#   my $g = start_grpc();          the server, on a free loopback port, plain-text HTTP/2;
#                                  stopped at the end of the test file (and by itself when
#                                  the test process goes away, or after RLTEST_TIMEOUT + 30 s)
#   $g->port, $g->addr, $g->pid, $g->stop
#   grpc_call($port, $method, $request [, \%metadata]) -> { code (grpc.StatusCode name:
#       'OK', 'UNAVAILABLE', ...), details, messages, initial => { name => value },
#       trailing => { name => value } }, code 'CLIENT' (and details) if the client failed
# $method is 'Unary' or 'Stream' (N messages, then the trailer).
use strict;
use warnings;
use Exporter 'import';
use JSON::PP ();
use RLTest::Util qw(repo_root run_cmd stop_child start_port_child);

our @EXPORT_OK = qw(grpc_missing start_grpc grpc_call);

my $PY = '/usr/bin/python3';
my @ALL;

sub _script { return repo_root() . '/t/lib/grpc_tokens.py' }

sub grpc_missing {
    return "no $PY" unless -x $PY;
    my ($rc) = run_cmd(20, $PY, '-c', 'import grpc');
    return $rc == 0 ? undef : 'python3-grpcio not importable by /usr/bin/python3 (./build.sh test installs it)';
}

sub start_grpc {
    my $secs = ($ENV{RLTEST_TIMEOUT} || 150) + 30;
    my ($pid, $port) = start_port_child('RLTest::Grpc: the server', $PY, _script(), 'serve', $secs);
    my $self = bless { pid => $pid, port => $port, creator => $$ }, __PACKAGE__;
    push @ALL, $self;
    return $self;
}

sub port { $_[0]{port} }
sub pid  { $_[0]{pid} }
sub addr { "127.0.0.1:$_[0]{port}" }

sub stop {
    my ($self) = @_;
    return unless $self->{pid} && $$ == $self->{creator};
    stop_child(delete $self->{pid}, 'TERM', 3);
}

sub stop_all { $_->stop for @ALL; @ALL = () }

END { local $?; stop_all() }    # reaping the server must not change the exit code

sub grpc_call {
    my ($port, $method, $request, $md) = @_;
    my @md = map { "$_=$md->{$_}" } sort keys %{ $md // {} };
    my ($rc, $out) = run_cmd(30, $PY, _script(), 'call', $port, $method, $request, @md);
    my ($json) = $out =~ /^(\{.*\})\s*\z/ms;
    my $r = $json ? eval { JSON::PP::decode_json($json) } : undef;
    return { code => 'CLIENT', details => "rc $rc: $out" } unless $r;
    $r->{$_} = { map { @$_ } @{ $r->{$_} } } for qw(initial trailing);
    return $r;
}

1;

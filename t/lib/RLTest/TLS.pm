package RLTest::TLS;
# A test PKI for the TLS tests, made when the test runs with the openssl command line tool
# (OpenSSL 3.0: `openssl ca` for the certificates, so that one can be given dates in the
# past) in a temporary directory of its own (RLTest::Util::temp_dir: removed at the end,
# kept with RLTEST_KEEP=1). EC P-256 keys (quick to make); every file readable by all (nginx
# workers run as nobody when the tests run as root). Core Perl only.
#
#   my $pki = RLTest::TLS->new;       # two CAs and the certificates below (~0.3 s)
#   $pki->dir                         where the files are
#   $pki->ca                          the test CA's certificate (PEM): what ssl_trusted_certificate= names
#   $pki->other_ca                    another CA's certificate, trusted by no one
#   $pki->cert($name), $pki->key($name)   a certificate (PEM) and its key (PEM, unencrypted):
#     server      DNS:localhost, IP:127.0.0.1, IP:::1; signed by the CA; serverAuth and clientAuth
#                 (Redis nodes present it to each other on the cluster bus and for replication)
#     client      CN=rltest-client, signed by the CA; clientAuth (mTLS)
#     expired     as server, but valid from 2020-01-01 to 2020-01-02 ("certificate has expired")
#     wrong_name  DNS:wrong.example only, signed by the CA ("does not match")
#     untrusted   as server, but signed by other_ca ("unable to get local issuer certificate")
#     other_client  a client certificate signed by other_ca (refused by an mTLS server)
#   $pki->make($name, %o)             one more: san => 'DNS:a,IP:1.2.3.4' (none), cn => (name),
#                                     ca => 'ca'|'other_ca', client => 1 (clientAuth only),
#                                     start => 'YYYYMMDDHHMMSSZ', end => ... (else days => 30)
#   $pki->chain($name)                a file with the certificate followed by its CA's (PEM)
#   $pki->verify($name [, $cafile])   (exit code, output) of `openssl verify` against $cafile (ca)
#   $pki->redis_tls(%o)               the tls => {...} of RLTest::Redis::start_redis with this PKI:
#                                     server => name ('server'), auth_clients => (no),
#                                     client => name ('client': what the test's own clients present)
# $OPENSSL names another binary.
use strict;
use warnings;
use RLTest::Util qw(temp_dir spew run_cmd);

our $OPENSSL = $ENV{OPENSSL} || 'openssl';
our $CMD_TIMEOUT = 20;    # seconds for one openssl command

sub new {
    my ($class, %o) = @_;
    my $self = bless { dir => $o{dir} // temp_dir('rltls'), certs => {} }, $class;
    chmod 0755, $self->{dir};
    $self->_make_ca('ca', 'rltest CA');
    $self->_make_ca('other_ca', 'rltest other CA');
    my $san = 'DNS:localhost,IP:127.0.0.1,IP:::1';
    $self->make('server', san => $san, cn => 'localhost', server_client => 1);
    $self->make('client', cn => 'rltest-client', client => 1);
    $self->make('expired', san => $san, cn => 'localhost', start => '20200101000000Z', end => '20200102000000Z');
    $self->make('wrong_name', san => 'DNS:wrong.example', cn => 'wrong.example');
    $self->make('untrusted', san => $san, cn => 'localhost', ca => 'other_ca', server_client => 1);
    $self->make('other_client', cn => 'rltest-other-client', client => 1, ca => 'other_ca');
    return $self;
}

sub dir      { $_[0]{dir} }
sub ca       { "$_[0]{dir}/ca/ca.pem" }
sub other_ca { "$_[0]{dir}/other_ca/ca.pem" }

sub cert {
    my ($self, $name) = @_;
    die "RLTest::TLS: no certificate \"$name\"\n" unless $self->{certs}{$name};
    return "$self->{dir}/$name.pem";
}

sub key {
    my ($self, $name) = @_;
    die "RLTest::TLS: no certificate \"$name\"\n" unless $self->{certs}{$name};
    return "$self->{dir}/$name.key";
}

sub _ossl {
    my ($self, @args) = @_;
    my ($rc, $out) = run_cmd($CMD_TIMEOUT, $OPENSSL, @args);
    die "openssl @args[0 .. ($#args < 3 ? $#args : 3)] ... failed (rc $rc):\n$out\n" if $rc != 0;
    return $out;
}

sub _genkey {
    my ($self, $file) = @_;
    $self->_ossl('genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', $file);
    chmod 0644, $file;
}

# A self-signed CA in $dir/$which/ with its own `openssl ca` database.
sub _make_ca {
    my ($self, $which, $cn) = @_;
    my $d = "$self->{dir}/$which";
    mkdir $d or die "mkdir $d: $!";
    chmod 0755, $d;
    spew("$d/index.txt", '');
    spew("$d/serial", sprintf("%04X\n", $which eq 'ca' ? 0x1000 : 0x2000));
    spew("$d/ca.cnf", <<"EOF");
[ca]
default_ca = this
[this]
dir = $d
database = $d/index.txt
serial = $d/serial
new_certs_dir = $d
certificate = $d/ca.pem
private_key = $d/ca.key
default_md = sha256
policy = any
copy_extensions = none
unique_subject = no
[any]
commonName = supplied
[req]
distinguished_name = dn
prompt = no
[dn]
CN = $cn
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
EOF
    $self->_genkey("$d/ca.key");
    $self->_ossl('req', '-x509', '-new', '-config', "$d/ca.cnf", '-extensions', 'v3_ca', '-key', "$d/ca.key",
        '-days', 3650, '-out', "$d/ca.pem");
    chmod 0644, "$d/ca.pem";
}

sub make {
    my ($self, $name, %o) = @_;
    die "RLTest::TLS: bad name \"$name\"\n" unless $name =~ /^\w+$/;
    my $ca = $o{ca} // 'ca';
    my $cd = "$self->{dir}/$ca";
    my $base = "$self->{dir}/$name";
    my $eku = $o{client} ? 'clientAuth' : $o{server_client} ? 'serverAuth,clientAuth' : 'serverAuth';
    my $ext = "[ext]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\n"
      . "extendedKeyUsage = $eku\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n"
      . (defined $o{san} ? "subjectAltName = $o{san}\n" : '');
    spew("$base.ext", $ext);
    $self->_genkey("$base.key");
    $self->_ossl('req', '-new', '-key', "$base.key", '-subj', '/CN=' . ($o{cn} // $name), '-out', "$base.csr");
    my @dates = defined $o{start} ? ('-startdate', $o{start}, '-enddate', $o{end} // die "make: start without end\n")
      : ('-days', $o{days} // 30);
    $self->_ossl('ca', '-batch', '-config', "$cd/ca.cnf", '-in', "$base.csr", '-out', "$base.pem", '-notext',
        '-extfile', "$base.ext", '-extensions', 'ext', @dates);
    chmod 0644, "$base.pem";
    $self->{certs}{$name} = $ca;
    return "$base.pem";
}

# The certificate followed by the certificate of its CA, in one file.
sub chain {
    my ($self, $name) = @_;
    my $f = "$self->{dir}/$name.chain.pem";
    my $ca = $self->{certs}{$name} eq 'ca' ? $self->ca : $self->other_ca;
    spew($f, RLTest::Util::slurp($self->cert($name)) . RLTest::Util::slurp($ca));
    chmod 0644, $f;
    return $f;
}

# (exit code, output) of `openssl verify -CAfile $cafile cert`, for the tests' own checks.
sub verify {
    my ($self, $name, $cafile, @more) = @_;
    my ($rc, $out) = run_cmd($CMD_TIMEOUT, $OPENSSL, 'verify', '-CAfile', $cafile // $self->ca, @more, $self->cert($name));
    return ($rc, $out);
}

# The tls => {...} option of start_redis / start_redis_cluster with this PKI's files.
sub redis_tls {
    my ($self, %o) = @_;
    my $server = $o{server} // 'server';
    my $client = $o{client} // 'client';
    return { cert => $self->cert($server), key => $self->key($server), ca => $o{ca} // $self->ca,
        auth_clients => $o{auth_clients} // 'no', client_cert => $self->cert($client),
        client_key => $self->key($client) };
}

1;

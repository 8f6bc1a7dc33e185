# The source tree keeps its layout (README "Layout"): the engine never names a front end, the
# core never names nginx, rooms have unique basenames (nginx names an object folder after the
# source folder's basename), few files at the top of src/core and src/ngx, no long functions.
# Reads the tree only: no nginx runs.
use strict;
use warnings;
use FindBin;
use File::Find;
use Test::More;

my $root = "$FindBin::Bin/..";
my @files;
find({ no_chdir => 1, wanted => sub { push @files, $File::Find::name if /\.(?:cpp|h)$/ } }, "$root/src");
@files = sort @files;
ok(@files > 100, 'the sources are found') or diag(scalar @files);

# The file's code without its comments (// to the end of a line) and string literals.
sub code_of {
    my ($path) = @_;
    open(my $fh, '<', $path) or die "$path: $!";
    local $/;
    my $text = <$fh>;
    $text =~ s{R"(\w*)\(.*?\)\1"}{""}gs;   # raw strings (the Lua, while it is C++)
    $text =~ s{"(?:[^"\\\n]|\\.)*"}{""}g;
    $text =~ s{//[^\n]*}{}g;
    return $text;
}

sub rel { my ($p) = @_; $p =~ s{^\Q$root\E/}{}; $p }

# Front ends: the folders under src/ngx that may name their nginx subsystem.
my %front = (http => qr/ngx_http|NGX_HTTP/, stream => qr/ngx_stream|NGX_STREAM/);
my (@engine_names_front, @core_names_nginx);
for my $f (@files) {
    my $r = rel($f);
    my $code = code_of($f);
    if ($r =~ m{^src/core/}) {
        push @core_names_nginx, $r if $code =~ /#\s*include\s*[<"](?:ngx_|ngx\/)/ || $code =~ /\bngx_\w+/;
        next;
    }
    my ($room) = $r =~ m{^src/ngx/([^/]+)/};
    for my $fe (sort keys %front) {
        next if defined $room && $room eq $fe;
        push @engine_names_front, "$r names $fe" if $code =~ $front{$fe};
    }
}
is_deeply(\@engine_names_front, [], 'no engine file (nor another front end) names a front end\'s nginx subsystem');
is_deeply(\@core_names_nginx, [], 'src/core names nothing of nginx');

# A file outside src/ngx/http that names ngx_http_request_t, included through a header, would
# also fail to compile without ngx_http.h: the engine's own header includes only nginx's core.
{
    my $inc = code_of("$root/src/ngx/ngx_include.h");
    unlike($inc, qr/ngx_http|ngx_stream/, 'ngx/ngx_include.h brings no front end\'s headers');
}

# Basenames of folders holding sources are unique (nginx's objs/addon/<basename>/).
{
    my (%seen, @dups);
    for my $f (@files) {
        next unless $f =~ /\.cpp$/;
        my $dir = rel($f);
        $dir =~ s{/[^/]+$}{};
        my ($base) = $dir =~ m{([^/]+)$};
        $seen{$base}{$dir} = 1;
    }
    for my $base (sort keys %seen) {
        my @dirs = sort keys %{ $seen{$base} };
        push @dups, "$base: @dirs" if @dirs > 1;
    }
    is_deeply(\@dups, [], 'source folders have unique basenames');
}

# A handful of files at the top of src/core and src/ngx: the rest in folders by concern.
for my $top ('src/core', 'src/ngx') {
    my @here = grep { m{^\Q$top\E/[^/]+$} } map { rel($_) } @files;
    ok(@here <= 4, "$top keeps at most 4 files at its top") or diag("@here");
}

# No function longer than ~120 lines (the code's style: a definition starts at column 0 and
# ends at the next '}' at column 0).
{
    my @long;
    for my $f (@files) {
        my @lines = split /\n/, code_of($f), -1;
        for (my $i = 0; $i < @lines; $i++) {
            next unless $lines[$i] =~ /^[A-Za-z_][^;]*\(/ && $lines[$i] !~ /^(?:namespace|#|constexpr\s+char)/;
            my $j = $i;
            $j++ while $j < @lines && $j < $i + 5 && $lines[$j] !~ /[{;]\s*$/;
            next unless $j < @lines && $lines[$j] =~ /\{\s*$/;
            my $k = $j + 1;
            $k++ while $k < @lines && $lines[$k] !~ /^\}/;
            my $n = $k - $i + 1;
            push @long, rel($f) . ':' . ($i + 1) . " ($n lines)" if $n > 120;
            $i = $k;
        }
    }
    is_deeply(\@long, [], 'no function in src/ is longer than 120 lines');
}

done_testing();

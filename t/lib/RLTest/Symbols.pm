package RLTest::Symbols;
# The dynamic symbols a shared object defines (nm -D --defined-only), and those the module
# may define: the three nginx looks up after dlopen (ngx_module.c's ngx_load_module:
# ngx_modules, ngx_module_names, ngx_module_order, from nginx's generated ngx_modules.c). nginx
# opens modules RTLD_GLOBAL, so whatever else a module exported would bind other modules' names
# of the same spelling (a second module of ours, or anyone's rl_*) to the first one loaded.
#   my ($names, $err) = dynamic_symbols($so);   sorted names, or undef and nm's complaint
use strict;
use warnings;
use Exporter 'import';
use RLTest::Util qw(run_cmd);

our @EXPORT_OK = qw(dynamic_symbols nginx_lookups);

sub nginx_lookups { return (qw(ngx_module_names ngx_module_order ngx_modules)) }

# $which: 'defined' (the default) or 'undefined'.
sub dynamic_symbols {
    my ($so, $which) = @_;
    my ($rc, $out) = run_cmd(30, 'nm', '-D', '--' . ($which // 'defined') . '-only', $so);
    return (undef, $out) if $rc != 0;
    # "<address> <type> <name>" or, undefined, "<type> <name>"; a version follows "@".
    # AddressSanitizer adds an "__odr_asan.NAME" beside each global it instruments (its check of
    # the one-definition rule): the sanitizer build's, not the module's.
    my @names = sort grep { !/^__odr_asan\./ } map { (split ' ')[-1] =~ s/@.*//r } grep { /\S/ } split /\n/, $out;
    return (\@names, '');
}

1;

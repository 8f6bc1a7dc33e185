// What the module reads of Redis's own replies about itself: INFO's "field:value" lines, and
// the address a Sentinel gives for a master.
#pragma once

#include <cstdint>
#include <string_view>

namespace rl {

// The value of `field` in an INFO reply ("# Server\r\nredis_mode:cluster\r\n..."); empty if absent.
std::string_view info_field(std::string_view info, std::string_view field);

// A port as Redis writes it ("6379"): 1..65535, digits only; 0 if not one.
uint16_t parse_port(std::string_view text);

}  // namespace rl

// A history location as messages may show it: a database URL's password never appears, whatever
// the URL's shape (a password holding '/', '+' or '@', a bad %-escape, a scheme fp8scope does not
// know), and neither do the copies of it a driver's own message repeats.
#pragma once

#include <string>

namespace fp8scope::history {

// The URL with its password (in the authority, up to its last '@', or as password=) as "***".
std::string redact_url(const std::string& url);

// `message` with every copy of the URL's password (as written and %-decoded), and of the URL,
// replaced.
std::string redact_message(std::string message, const std::string& url);

}  // namespace fp8scope::history

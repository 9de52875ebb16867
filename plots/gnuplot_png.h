// Drawing one PNG with gnuplot, through gnuplot-iostream's pipe, and making sure it
// worked. gnuplot keeps going after an error in piped input and its pipe's exit status is
// not reported by gnuplot-iostream, so the session runs as `gnuplot 2>err; echo $? >status`
// and the figure counts only when the status is 0 and the file is a real PNG. A stale
// file from an earlier run is removed first, so it can never pass for a new one.
#pragma once
#include <functional>
#include <string>

namespace gnuplotio {
class Gnuplot;  // <gnuplot-iostream.h>, included by the .cpp files that draw
}

namespace kit::plots {

struct PngOptions {
  std::string gnuplot = "gnuplot";  // the program to run
  int width = 800, height = 600;   // pixels
};

// The best PNG terminal this gnuplot has: "pngcairo" (antialiased) or else "png" (libgd).
// Throws kit::Error saying how to install gnuplot when it cannot be run or has neither.
std::string png_terminal(const std::string& gnuplot);

// Starts gnuplot with the PNG terminal (UTF-8, no enhanced text, so '_' stays '_') and
// output set to `png_path` (parent directories created), lets `draw` send commands and
// data, waits for gnuplot to exit and checks the result. Throws kit::Error with
// gnuplot's messages when it failed; prints its warnings (if any) on stderr.
void render_png(const std::string& png_path, const PngOptions& options, const std::function<void(gnuplotio::Gnuplot&)>& draw);

// True when `path` is a non-empty file starting with the 8-byte PNG signature.
bool is_png_file(const std::string& path);

// `s` as a gnuplot double-quoted string literal (backslashes and quotes escaped).
std::string gp_quote(const std::string& s);

}  // namespace kit::plots

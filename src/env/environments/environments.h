// Factories of the built-in environments, one file each in this folder (registry.cpp lists them).
#pragma once

#include <memory>

#include "env/environment.h"
#include "env/sandbox.h"

namespace trellis::env {

std::unique_ptr<Environment> make_math_environment();
std::unique_ptr<Environment> make_code_environment(const SandboxLimits& limits);
std::unique_ptr<Environment> make_countdown_environment();
std::unique_ptr<Environment> make_arithmetic_environment();
std::unique_ptr<Environment> make_reverse_text_environment();
std::unique_ptr<Environment> make_sort_environment();
std::unique_ptr<Environment> make_sudoku_environment();
std::unique_ptr<Environment> make_maze_environment();
std::unique_ptr<Environment> make_knights_knaves_environment();

}  // namespace trellis::env

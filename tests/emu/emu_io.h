// emu_io.h -- the file exchange of the emulation harnesses (tests/emu/*_emu.cpp) with their Rust
// tests: whole little-endian arrays in DIR/name.bin, read back as written.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// The elements of file `p` (empty when it does not exist; exit 3 on a short read).
template <class T>
std::vector<T> read_file(const std::string& p) {
  std::vector<T> v;
  FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return v;
  std::fseek(f, 0, SEEK_END);
  const long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  v.resize((size_t)n / sizeof(T));
  if (std::fread(v.data(), sizeof(T), v.size(), f) != v.size()) std::exit(3);
  std::fclose(f);
  return v;
}

// Write `v` to file `p` (exit 4 on failure).
template <class T>
void write_file(const std::string& p, const std::vector<T>& v) {
  FILE* f = std::fopen(p.c_str(), "wb");
  if (!f || std::fwrite(v.data(), sizeof(T), v.size(), f) != v.size()) std::exit(4);
  std::fclose(f);
}

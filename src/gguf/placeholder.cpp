// gguf/placeholder.cpp — PLACEHOLDER so the room links before the reader lands; delete when it does.
namespace dsv4::gguf {
int gguf_placeholder_symbol = 0;
}

// tokenizer/placeholder.cpp — PLACEHOLDER so the room links before the tokenizer lands; delete when it does.
namespace dsv4::tokenizer {
int tokenizer_placeholder_symbol = 0;
}

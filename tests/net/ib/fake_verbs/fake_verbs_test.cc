#include <gtest/gtest.h>
TEST(FakeVerbs, Placeholder) {}

// The registry generation the proxy's plan cache relies on: every change bumps it, a refused call
// does not, so an unchanged generation proves a cached plan is current.
#include <gtest/gtest.h>

#include "compress/mask_registry.h"

namespace sieve::compress {
namespace {

TEST(RegistryGenerationTest, EveryChangeBumpsItAndNothingElseDoes) {
  MaskRegistry registry;
  std::vector<float> a(64), b(64);
  EXPECT_EQ(registry.generation(), 0u);
  uint64_t id = 0;
  ASSERT_TRUE(registry.publish(a.data(), 4, std::make_shared<const Mask>(64, true), &id).ok());
  const uint64_t g1 = registry.generation();
  EXPECT_GT(g1, 0u);
  EXPECT_FALSE(registry.publish(nullptr, 4, std::make_shared<const Mask>(64, true), &id).ok());
  EXPECT_FALSE(registry.retract(b.data()).ok());
  registry.lookup(a.data(), 64, 4);
  EXPECT_EQ(registry.generation(), g1) << "refused calls and lookups change nothing";
  ASSERT_TRUE(registry.publish(a.data(), 4, std::make_shared<const Mask>(64, false), &id).ok());
  const uint64_t g2 = registry.generation();
  EXPECT_GT(g2, g1);
  ASSERT_TRUE(registry.retract(a.data()).ok());
  const uint64_t g3 = registry.generation();
  EXPECT_GT(g3, g2);
  registry.clear();
  EXPECT_GT(registry.generation(), g3);
}

}  // namespace
}  // namespace sieve::compress

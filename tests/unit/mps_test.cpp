// gv::mps against a stand-in `nvidia-cuda-mps-control` (a shell script in a temporary PATH
// directory that behaves like the real one: `-d` creates the control pipe, a client without
// the pipe says "Cannot find MPS control daemon process" and exits 1, `quit` removes it), in
// a temporary CUDA_MPS_PIPE_DIRECTORY. The real daemon is never touched.
#include "gpuverbs/mps.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

class Mps : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/gv-mps-test-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        bin_ = dir_ + "/bin";
        pipe_ = dir_ + "/pipe";
        ASSERT_EQ(mkdir(bin_.c_str(), 0700), 0);
        save("PATH", path_);
        save("CUDA_MPS_PIPE_DIRECTORY", pipe_dir_);
        setenv("PATH", bin_.c_str(), 1);  // only the stand-in, whatever the machine has
        setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_.c_str(), 1);
    }
    void TearDown() override {
        restore("PATH", path_);
        restore("CUDA_MPS_PIPE_DIRECTORY", pipe_dir_);
        std::string cmd = "rm -rf '" + dir_ + "'";
        EXPECT_EQ(std::system(cmd.c_str()), 0);
    }

    /// Installs the stand-in control program; `start` is the shell code run for `-d`.
    void install(const std::string& start) {
        std::string f = bin_ + "/nvidia-cuda-mps-control";
        std::ofstream o(f);
        o << "#!/bin/sh\n"
             "PATH=/usr/bin:/bin\n"
             "d=\"${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}\"\n"
             "if [ \"$1\" = -d ]; then\n"
          << start
          << "\nfi\n"
             "[ -e \"$d/control\" ] || { echo 'Cannot find MPS control daemon process'; exit 1; }\n"
             "read cmd\n"
             "case \"$cmd\" in quit) rm -f \"$d/control\" ;; esac\n"
             "exit 0\n";
        o.close();
        ASSERT_EQ(chmod(f.c_str(), 0700), 0);
    }

    std::string dir_, bin_, pipe_;

private:
    struct Saved {
        bool set = false;
        std::string value;
    };
    static void save(const char* name, Saved& s) {
        const char* v = std::getenv(name);
        s.set = v != nullptr;
        s.value = v ? v : "";
    }
    static void restore(const char* name, const Saved& s) {
        if (s.set) setenv(name, s.value.c_str(), 1);
        else unsetenv(name);
    }
    Saved path_, pipe_dir_;
};

long ms_since(std::chrono::steady_clock::time_point t0) {
    return long(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

TEST_F(Mps, PipeDirectoryFollowsTheEnvironment) {
    EXPECT_EQ(gv::mps::pipe_directory(), pipe_);
    unsetenv("CUDA_MPS_PIPE_DIRECTORY");
    EXPECT_EQ(gv::mps::pipe_directory(), "/tmp/nvidia-mps");
}

TEST_F(Mps, NotRunningExplainsHowToStart) {
    install("exit 1");
    EXPECT_FALSE(gv::mps::running());
    std::string m = gv::mps::ensure(false);
    EXPECT_NE(m.find("not running"), std::string::npos) << m;
    EXPECT_NE(m.find(pipe_ + "/control"), std::string::npos) << m;
    EXPECT_NE(m.find("`nvidia-cuda-mps-control -d`"), std::string::npos) << m;
    EXPECT_NE(m.find("time-slice"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    gv::mps::stop();  // nothing to stop: no effect, no throw
    EXPECT_FALSE(gv::mps::running());
}

TEST_F(Mps, MissingProgramIsNamed) {
    std::string m = gv::mps::ensure(true);
    EXPECT_NE(m.find("not in PATH"), std::string::npos) << m;
    EXPECT_FALSE(gv::mps::running());
}

TEST_F(Mps, StartsThenStops) {
    install("mkdir -p \"$d\" && mkfifo \"$d/control\"; exit $?");
    EXPECT_FALSE(gv::mps::running());
    EXPECT_EQ(gv::mps::ensure(true), "");
    EXPECT_TRUE(gv::mps::running());
    EXPECT_EQ(gv::mps::ensure(false), "") << "already running";
    gv::mps::stop();
    EXPECT_FALSE(gv::mps::running());
}

// A stale pipe (a daemon that died) is not a running daemon.
TEST_F(Mps, StalePipeIsNotRunning) {
    ASSERT_EQ(mkdir(pipe_.c_str(), 0700), 0);
    std::ofstream(pipe_ + "/control").close();
    // What the real client says when nothing listens on the pipe.
    std::string f = bin_ + "/nvidia-cuda-mps-control";
    std::ofstream o(f);
    o << "#!/bin/sh\nPATH=/usr/bin:/bin\necho 'Cannot find MPS control daemon process'\nexit 1\n";
    o.close();
    ASSERT_EQ(chmod(f.c_str(), 0700), 0);
    EXPECT_FALSE(gv::mps::running());
}

// A start that fails reports the program's own message, within about a second.
TEST_F(Mps, FailedStartSaysWhy) {
    install("echo 'mkdir: cannot create directory: Permission denied' >&2; exit 1");
    auto t0 = std::chrono::steady_clock::now();
    std::string m = gv::mps::ensure(true);
    EXPECT_LT(ms_since(t0), 4000);
    EXPECT_NE(m.find("could not start"), std::string::npos) << m;
    EXPECT_NE(m.find("exited with status 1"), std::string::npos) << m;
    EXPECT_NE(m.find("Permission denied"), std::string::npos) << m;
    EXPECT_NE(m.find("as the GPU's owner or root"), std::string::npos) << m;
}

// A control program that hangs is killed at its deadline: running() stays bounded.
TEST_F(Mps, HungClientIsBounded) {
    ASSERT_EQ(mkdir(pipe_.c_str(), 0700), 0);
    std::ofstream(pipe_ + "/control").close();
    std::string f = bin_ + "/nvidia-cuda-mps-control";
    std::ofstream o(f);
    o << "#!/bin/sh\nPATH=/usr/bin:/bin\nexec sleep 30\n";
    o.close();
    ASSERT_EQ(chmod(f.c_str(), 0700), 0);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(gv::mps::running());
    EXPECT_LT(ms_since(t0), 6000);
}

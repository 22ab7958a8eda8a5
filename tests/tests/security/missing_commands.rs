//! A user without a command the scripts need is refused when the client starts, naming the
//! command.

use super::*;

/// A rule without a command dlock's scripts need makes a script fail half-way, keeping
/// what it wrote: without `+pexpireat` a release writes the next waiter's hold and then
/// cannot give it an expiry (a hold nobody was told of, stuck until force-unlocked);
/// without `+pubsub|numsub` it pops the oldest waiter and never tells it. So a client
/// whose user lacks one refuses to start, in script mode and in function mode, with an
/// error naming each command and the documented rule. Before the fix such a client
/// started, and failed at its first hand-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_a_command_the_scripts_need_is_refused_at_start() {
    let (server, mut admin) = server_with_function_user().await;
    for (mode, base) in [
        (ScriptMode::Eval, acl_rule(Mode::Single, "shop:")),
        (ScriptMode::Functions, functions_rule(Mode::Single, "shop:")),
    ] {
        let rule: Vec<String> = base
            .into_iter()
            .filter(|token| token != "+pexpireat" && token != "+pubsub|numsub")
            .collect();
        set_user(&mut admin, "lacking", ACL_PASSWORD, &rule);
        let url = with_credentials(&server.url(), "lacking", ACL_PASSWORD);
        let refused = LockClient::builder()
            .key_prefix("shop:")
            .script_mode(mode)
            .connect(&url)
            .await
            .unwrap_err();
        match &refused {
            LockError::MissingCommands { missing, .. } => {
                assert_eq!(missing, &["pexpireat", "pubsub|numsub"], "{mode:?}");
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        let shown = refused.to_string();
        assert!(
            shown.contains("may not run pexpireat, pubsub|numsub")
                && shown.contains("docs/SECURITY.md")
                && !shown.contains(ACL_PASSWORD),
            "{shown}"
        );
        assert_eq!(refused.kind(), dlock::ErrorKind::Setup);
    }
}

//! The SQL of what only resources do, written once for both backends: the
//! [`RegistryStore`](crate::store::RegistryStore) implementation and resources'
//! [`CollectionStore`](crate::registry::collection::CollectionStore).
//!
//! Resources are listed and read like the other collections ([`super::collections`]), but a change of one
//! stores content and its size, versions it, and announces exactly what changed: an `updated` notification
//! for a replaced or deleted resource a client may hold, a list change only when what lists show changed
//! ([`Change::resource_put`](super::Change::resource_put)). A batch does many such changes in one
//! transaction with one event.

/// Expands the [`RegistryStore`](crate::store::RegistryStore) implementation and resources'
/// [`CollectionStore`](crate::registry::collection::CollectionStore) for `$store`.
macro_rules! impl_registry_store {
    ($store:ty, $db:ty) => {
        /// Statements used inside write transactions.
        impl $store {
            /// `agent`'s resource at `uri` with its content, read through `executor`.
            async fn resource_in<'c>(
                executor: impl Executor<'c>,
                agent: &AgentId,
                uri: &str,
            ) -> StoreResult<Option<(Resource, Content)>> {
                let query = sqlx::query_as::<$db, ResourceContentRow>(concat!(
                    "select ",
                    resource_content_columns!(),
                    " from resource where agent_id = $1 and uri = $2"
                ))
                .bind(agent.as_str())
                .bind(uri);
                Self::one(query, executor).await
            }

            /// Creates or replaces one resource and writes its audit row; returns the stored resource
            /// and the one it replaced.
            async fn upsert_resource_in(
                tx: &mut Tx,
                agent: &AgentId,
                new: &NewResource,
                actor: &Actor,
                now: Timestamp,
            ) -> StoreResult<(Option<Resource>, Resource)> {
                let before = Self::resource_in(&mut **tx, agent, new.uri.as_str()).await?;
                let after = Resource {
                    uri: new.uri.clone(),
                    name: new.name.clone(),
                    title: new.title.clone(),
                    description: new.description.clone(),
                    mime_type: new.mime_type.clone(),
                    size: new.content.size(),
                    annotations: new.annotations.clone(),
                    meta: new.meta.clone(),
                    version: before.as_ref().map_or(1, |(old, _)| old.version + 1),
                    created_at: before.as_ref().map_or(now, |(old, _)| old.created_at),
                    updated_at: now,
                };
                let (text, blob) = match &new.content {
                    Content::Text(text) => (Some(text.as_str()), None),
                    Content::Blob(bytes) => (None, Some(bytes.as_slice())),
                };
                let statement = if before.is_some() {
                    "update resource set name = $3, title = $4, description = $5, mime_type = $6, \
                     content_text = $7, content_blob = $8, size = $9, annotations = $10, meta = $11, \
                     version = $12, updated_at = $14 where agent_id = $1 and uri = $2"
                } else {
                    "insert into resource (agent_id, uri, name, title, description, mime_type, content_text, \
                     content_blob, size, annotations, meta, version, created_at, updated_at) \
                     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
                };
                sqlx::query::<$db>(statement)
                    .bind(agent.as_str())
                    .bind(after.uri.as_str())
                    .bind(after.name.as_str())
                    .bind(after.title.as_deref())
                    .bind(after.description.as_deref())
                    .bind(after.mime_type.as_deref())
                    .bind(text)
                    .bind(blob)
                    .bind(to_i64(after.size))
                    .bind(json_text(after.annotations.as_ref()))
                    .bind(json_text(after.meta.as_ref()))
                    .bind(after.version)
                    .bind(after.created_at.as_micros())
                    .bind(now.as_micros())
                    .execute(&mut **tx)
                    .await
                    .map_err(Self::error)?;
                let (target, stored) = (after.uri.as_str(), Some((&after, &new.content)));
                let replaced = before.as_ref().map(|(old, content)| (old, content));
                let audit = Audit::with_content(agent, actor, AuditAction::ResourcePut, target, replaced, stored);
                Self::insert_audit(tx, audit, now).await?;
                Ok((before.map(|(old, _)| old), after))
            }

            /// Deletes one resource and writes its audit row; `NotFound` when it does not exist.
            async fn delete_resource_in(
                tx: &mut Tx,
                agent: &AgentId,
                uri: &ResourceUri,
                actor: &Actor,
                now: Timestamp,
            ) -> StoreResult<()> {
                let (before, content) =
                    Self::resource_in(&mut **tx, agent, uri.as_str()).await?.ok_or(StoreError::NotFound)?;
                sqlx::query::<$db>("delete from resource where agent_id = $1 and uri = $2")
                    .bind(agent.as_str())
                    .bind(uri.as_str())
                    .execute(&mut **tx)
                    .await
                    .map_err(Self::error)?;
                let deleted = Some((&before, &content));
                let audit = Audit::with_content(agent, actor, AuditAction::ResourceDelete, uri.as_str(), deleted, None);
                Self::insert_audit(tx, audit, now).await
            }
        }

        #[async_trait::async_trait]
        impl RegistryStore for $store {
            #[tracing::instrument(skip_all, fields(agent = %agent, upserts = upserts.len(), deletes = deletes.len()))]
            async fn batch_resources(
                &self,
                agent: &AgentId,
                upserts: &[NewResource],
                deletes: &[ResourceUri],
                actor: &Actor,
            ) -> StoreResult<BatchOutcome> {
                if upserts.is_empty() && deletes.is_empty() {
                    // Nothing changes, so no event; the agent must still exist.
                    return match self.get_agent(agent).await? {
                        Some(_) => Ok(BatchOutcome::default()),
                        None => Err(StoreError::NotFound),
                    };
                }
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let mut change = Change::default();
                let mut outcome = BatchOutcome::default();
                for resource in upserts {
                    let (before, after) = Self::upsert_resource_in(&mut tx, agent, resource, actor, now).await?;
                    change.resource_put(before.as_ref(), &after);
                    outcome.upserted.push(Upserted { item: after, created: before.is_none() });
                }
                for uri in deletes {
                    // An error drops `tx`, which rolls the whole batch back.
                    Self::delete_resource_in(&mut tx, agent, uri, actor, now).await.map_err(|error| match error {
                        StoreError::NotFound => StoreError::Absent(format!(
                            "resource {:?} does not exist, so it cannot be deleted; nothing was changed",
                            uri.as_str()
                        )),
                        other => other,
                    })?;
                    change.resource_deleted(uri.as_str());
                    outcome.deleted.push(uri.clone());
                }
                self.check_quotas::<Resources>(&mut tx, agent).await?;
                self.finish_change(tx, agent, seq, &change, now).await?;
                Ok(outcome)
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, uri = uri))]
            async fn get_resource(&self, agent: &AgentId, uri: &str) -> StoreResult<Option<(Resource, Content)>> {
                Self::resource_in(self.reader(), agent, uri).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn directory_children(
                &self,
                agent: &AgentId,
                prefix: &str,
                limit: u32,
            ) -> StoreResult<Vec<Resource>> {
                // A range on the primary key, `(prefix, successor of prefix)`, narrowed in SQL to URIs with no
                // further `/` after the prefix, so deeper resources neither cost nor crowd out children.
                let Some(upper) = prefix_upper_bound(prefix) else {
                    return Ok(Vec::new());
                };
                let rest_from = i32::try_from(prefix.chars().count() + 1)
                    .map_err(|_| StoreError::Corrupt("directory prefix too long".to_owned()))?;
                let query = sqlx::query_as::<$db, ResourceRow>(concat!(
                    "select ",
                    resource_columns!(),
                    " from resource where agent_id = $1 and uri > $2 and uri < $3 \
                      and substr(uri, $4) not like '%/%' order by uri limit $5"
                ))
                .bind(agent.as_str())
                .bind(prefix)
                .bind(upper)
                .bind(rest_from)
                .bind(i64::from(limit));
                Self::all(query, self.reader()).await
            }
        }

        #[async_trait::async_trait]
        impl CollectionStore<Resources> for $store {
            #[tracing::instrument(skip_all, fields(agent = %agent, uri = %resource.uri))]
            async fn put(
                &self,
                agent: &AgentId,
                resource: &NewResource,
                actor: &Actor,
            ) -> StoreResult<Upserted<Resource>> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let (before, after) = Self::upsert_resource_in(&mut tx, agent, resource, actor, now).await?;
                self.check_quotas::<Resources>(&mut tx, agent).await?;
                let mut change = Change::default();
                change.resource_put(before.as_ref(), &after);
                self.finish_change(tx, agent, seq, &change, now).await?;
                Ok(Upserted { item: after, created: before.is_none() })
            }

            async fn list(&self, agent: &AgentId, after: After<'_>, limit: u32) -> StoreResult<Vec<Resource>> {
                self.collection_page::<Resources>(agent, after, limit).await
            }

            async fn get(&self, agent: &AgentId, key: &ResourceUri) -> StoreResult<Option<Resource>> {
                Self::collection_item::<Resources>(self.reader(), agent, key.as_str()).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, uri = %uri))]
            async fn delete(&self, agent: &AgentId, uri: &ResourceUri, actor: &Actor) -> StoreResult<()> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                Self::delete_resource_in(&mut tx, agent, uri, actor, now).await?;
                let mut change = Change::default();
                change.resource_deleted(uri.as_str());
                self.finish_change(tx, agent, seq, &change, now).await
            }
        }
    };
}

pub(in crate::store) use impl_registry_store;
